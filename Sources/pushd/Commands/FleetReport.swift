import Posix
import APNs
import QueueStore

/// What `pushd status` concludes from a `FleetSnapshot`: a pure function of the snapshot,
/// so every rule below is tested with plain values.
///
/// Degraded (exit code 1) when any of these holds: the database takes no writes (read-only,
/// or a standby in recovery); no live instance; an instance silent
/// for over a minute (gone, not yet cleaned up); live instances serving different app
/// sets; due work of an app that no live instance serves; an app paused for its
/// credentials; a scope of an app held for its configuration (TopicDisallowed, …); a transactional or broadcast job due for longer than a minute; a channel
/// request (create or delete) due for longer than a minute, or waiting for an app no live
/// instance serves. Mixed versions (a rolling upgrade), a live instance that has missed
/// heartbeats, dead letters, failed channels, retries and an app no live instance has a token key for (a certificate-only app sends its
/// alerts; only its token-only work is dead-lettered) are shown but do not degrade.
struct FleetReport: Sendable {
    struct Instance: Sendable {
        var record: InstanceRecord
        var alive: Bool { !record.isGone }
    }

    struct QueueRow: Sendable {
        var app: String
        var lane: String
        var due: Int
        var scheduled: Int
        var oldestDueSeconds: Double
        /// False when no live instance is configured for the app: its work waits.
        var served: Bool
        /// Remaining targets of campaigns held because a CHECK refuses their row: not due,
        /// since nothing sends them until the hold ends (`LaneDepth.refused`).
        var refused: Int = 0
    }

    struct CampaignRow: Sendable {
        var campaign: ActiveCampaign
        var processed: Int { campaign.progress.sent + campaign.progress.failed }
        var percent: Double {
            campaign.progress.targets == 0 ? 0 : 100 * Double(processed) / Double(campaign.progress.targets)
        }
        /// Average notifications per second since it started; nil before it started.
        var averageRate: Double? {
            guard let seconds = campaign.runningSeconds, seconds > 0 else { return nil }
            return Double(processed) / seconds
        }
        /// Whether it is being sent now: running, a chunk under a live lease (or none leased only
        /// for a capped campaign's pause between leases), and a live instance serving its app
        /// whose heartbeat is not late. Otherwise the average rate is history, not what it sends
        /// now (its workers lost the database, or none has taken a chunk).
        var sendingNow = false
    }

    /// An app paused as a whole (`scope` nil), or one scope of it held (a topic APNs refuses
    /// to its credentials, its broadcasts, its channel creation).
    struct PausedApp: Sendable, Hashable {
        var app: String
        var scope: String?
        var reason: String
        var instance: String

        init(app: String, scope: String? = nil, reason: String, instance: String) {
            self.app = app
            self.scope = scope
            self.reason = reason
            self.instance = instance
        }

        /// From a key of `pushd.instances.paused`: "shop", or "shop topic com.example.shop.voip (sandbox)".
        init(key: String, reason: String, instance: String) {
            if let space = key.firstIndex(of: " ") {
                app = String(key[..<space])
                scope = String(key[key.index(after: space)...])
            } else {
                app = key
                scope = nil
            }
            self.reason = reason
            self.instance = instance
        }
    }

    var instances: [Instance]
    var queue: [QueueRow]
    var campaigns: [CampaignRow]
    var deadLetters: [DeadLetterCount]
    var paused: [PausedApp]
    /// Broadcast channels and broadcast jobs per app, with whether a live instance serves it.
    var broadcast: [(status: BroadcastAppStatus, served: Bool)]
    /// What each live instance advertises per app and leaves to the others.
    var coverage: FleetCoverage
    /// Whether the database takes writes: while it does not, pushd records and sends nothing,
    /// and the instances' heartbeats stand still.
    var writability: DatabaseWritability
    /// Why the fleet is degraded; empty when healthy.
    var problems: [String]
    /// Worth knowing, not degrading.
    var notes: [String]

    var healthy: Bool { problems.isEmpty }
    var exitCode: Int32 { healthy ? 0 : 1 }

    /// Transactional jobs due longer than this degrade the fleet (the alert
    /// PushdTransactionalLaneBehind uses the same threshold).
    static let transactionalLagLimit = 60.0

    /// A live instance silent for longer than this has missed a heartbeat (written every
    /// `InstanceStore.heartbeatSeconds`): it does not reach the database now, or is stalled.
    /// Twice the interval, so a heartbeat read just before the next one is written is not late.
    static let lateHeartbeatSeconds = 2 * InstanceStore.heartbeatSeconds

    init(_ snapshot: FleetSnapshot) {
        instances = snapshot.instances.map(Instance.init)
        let live = instances.filter(\.alive).map(\.record)
        let served = Set(live.flatMap(\.registration.apps))
        queue = snapshot.lanes.map { lane in
            QueueRow(app: lane.app, lane: lane.lane.rawValue, due: lane.depth, scheduled: lane.scheduled,
                     oldestDueSeconds: lane.oldestAge, served: served.contains(lane.app), refused: lane.refused)
        }
        campaigns = snapshot.campaigns.map { campaign in
            var row = CampaignRow(campaign: campaign)
            row.sendingNow = campaign.progress.status == .running && campaign.progress.refusedBy == nil
                && (campaign.chunksSending > 0 || campaign.waitingForWorkerSeconds == nil)
                && live.contains { $0.registration.apps.contains(campaign.progress.app) && $0.silentSeconds <= Self.lateHeartbeatSeconds }
            return row
        }
        deadLetters = snapshot.deadLettersLastHour
        broadcast = snapshot.broadcast.map { ($0, served.contains($0.app)) }
        paused = live.flatMap { record in
            record.paused.map { PausedApp(key: $0.key, reason: $0.value, instance: record.registration.id) }
        }.sorted { ($0.app, $0.scope ?? "", $0.instance) < ($1.app, $1.scope ?? "", $1.instance) }
        coverage = FleetCoverage(live: live.map(\.registration))
        writability = snapshot.writability
        // No heartbeat can be written to a read-only database: silence then says nothing of the instances.
        let readOnly = writability != .writable

        var problems = [String]()
        var notes = [String]()
        if let problem = Self.readOnlyProblem(writability) {
            problems.append(problem)
        }
        if live.isEmpty {
            problems.append(readOnly && !instances.isEmpty
                            ? "no live pushd instance shown: none can write its heartbeat to the read-only database, so running ones look gone; nothing is being sent"
                            : "no live pushd instance: nothing is being sent")
        }
        for gone in instances.filter({ !$0.alive }) {
            problems.append("instance \(gone.record.registration.id) (\(gone.record.registration.version)) has been silent for \(TimeText.duration(gone.record.silentSeconds)): "
                            + (readOnly ? "the database takes no writes, so no heartbeat can be written; it may still be running"
                                        : "killed, frozen or cut off from the database"))
        }
        let appSets = Dictionary(grouping: live, by: { $0.registration.apps })
        if appSets.count > 1 {
            let described = appSets.keys.sorted { $0.lexicographicallyPrecedes($1) }.map { apps in
                "[\(apps.joined(separator: ","))] on \(appSets[apps]!.map(\.registration.id).joined(separator: ", "))"
            }
            problems.append("instances serve different app sets: \(described.joined(separator: "; "))")
        }
        for app in Set(live.flatMap(\.registration.apps)).sorted() {
            let homes = Dictionary(grouping: live.compactMap { record in record.registration.home(of: app).map { ($0, record.registration.id) } },
                                   by: \.0)
            guard homes.count > 1 else { continue }
            let described = homes.keys.sorted().map { "\($0) on \(homes[$0]!.map(\.1).sorted().joined(separator: ", "))" }
            problems.append("instances disagree on the environment of app \(app): \(described.joined(separator: "; ")); a notification that names "
                            + "no environment, to a token registered without one, goes to the host of whichever instance claims it, and the "
                            + "other host answers BadDeviceToken, which prunes the token; give every instance the same apps[\(app)].environment")
        }
        let versions = Set(live.map(\.registration.version))
        if versions.count > 1 {
            notes.append("instances run different versions (\(versions.sorted().joined(separator: ", "))): expected during a rolling upgrade only")
        }
        var unserved = [String: Int]()
        for row in queue where row.lane != "campaign" && !row.served && row.due > 0 { unserved[row.app, default: 0] += row.due }
        for row in campaigns where row.campaign.progress.due && !served.contains(row.campaign.progress.app) {
            unserved[row.campaign.progress.app, default: 0] += row.campaign.progress.remaining
        }
        for (app, count) in unserved.sorted(by: { $0.key < $1.key }) where count > 0 {
            problems.append("\(count) due notification(s) of app \(app), which no live instance serves, are waiting")
        }
        for app in paused {
            if let scope = app.scope {
                problems.append("app \(app.app): sending of \(scope) is held on \(app.instance), its notifications are kept: \(app.reason)")
            } else {
                problems.append("app \(app.app) is paused on \(app.instance): \(app.reason)")
            }
        }
        for record in live {
            for (app, detail) in record.apnsUnavailable.sorted(by: { $0.key < $1.key }) {
                // A lane that cannot set up its connections (`PipelineContext.connectionSetupFailures`)
                // is this host's failure, not APNs's: said apart.
                let entries = Self.entries(ofAPNsUnavailable: detail)
                let unconnected = entries.filter { $0.contains(text: PipelineContext.cannotConnectMarker) }
                let outage = entries.filter { !$0.contains(text: PipelineContext.cannotConnectMarker) }
                if !outage.isEmpty {
                    problems.append("APNs is not taking notifications of app \(app) on \(record.registration.id): \(outage.joined(separator: "; "))")
                }
                if !unconnected.isEmpty {
                    problems.append("app \(app) cannot connect to APNs on \(record.registration.id), its notifications are kept: \(unconnected.joined(separator: "; "))")
                }
            }
        }
        for row in campaigns {
            guard let check = row.campaign.progress.refusedBy else { continue }
            let id = row.campaign.progress.id
            problems.append("campaign \(id) of app \(row.campaign.progress.app) is held and sends nothing: CHECK \(check) of pushd.campaigns, added NOT VALID after it was created, refuses to write its row; "
                            + "its \(row.campaign.progress.remaining) remaining target(s) are counted as refused, not due; "
                            + "`pushd campaign pause \(id)` says what the check says and how to end the hold (pushd.campaign_refusals)")
        }
        for row in campaigns where served.contains(row.campaign.progress.app) {
            guard let seconds = row.campaign.waitingForWorkerSeconds, seconds >= CampaignWaitWatch.reportAfter else { continue }
            let progress = row.campaign.progress
            problems.append("campaign \(progress.id) of app \(progress.app) has had chunks to send and no worker sending any for \(TimeText.duration(seconds)): "
                            + Self.waitingForWorkerCause(row, campaigns: campaigns, live: live))
        }
        for record in live where record.silentSeconds > Self.lateHeartbeatSeconds {
            notes.append("instance \(record.registration.id) last wrote its heartbeat \(TimeText.duration(record.silentSeconds)) ago "
                         + "(one every \(TimeText.duration(InstanceStore.heartbeatSeconds))): "
                         + (readOnly ? "the database takes no writes, so it cannot write one; " : "it does not reach the database now, or is stalled; ")
                         + "it is shown as gone after \(TimeText.duration(InstanceStore.goneAfterSeconds))")
        }
        for row in queue where row.lane == "transactional" && row.served && row.due > 0 && row.oldestDueSeconds > Self.transactionalLagLimit {
            problems.append("transactional jobs of app \(row.app) have been due for \(TimeText.duration(row.oldestDueSeconds))")
        }
        for (status, served) in broadcast {
            let app = status.app
            if served && status.jobsDue > 0 && status.oldestDueJobSeconds > Self.transactionalLagLimit {
                problems.append("broadcast jobs of app \(app) have been due for \(TimeText.duration(status.oldestDueJobSeconds))"
                                + (status.lastJobError.map { " (last error: \($0))" } ?? ""))
            }
            if !served && status.pendingChannelOperations > 0 {
                problems.append("\(status.pendingChannelOperations) channel request(s) of app \(app), which no live instance serves, are waiting")
            } else if status.oldestDueChannelOperationSeconds > Self.transactionalLagLimit {
                problems.append("channel requests of app \(app) have been due for \(TimeText.duration(status.oldestDueChannelOperationSeconds)) without a worker taking them")
            }
            if status.retryingChannelOperations > 0 {
                notes.append("\(status.retryingChannelOperations) channel request(s) of app \(app) wait for a retry"
                             + (status.lastChannelError.map { " (last outcome: \($0))" } ?? ""))
            }
            if status.failedChannels > 0 {
                notes.append("\(status.failedChannels) channel request(s) of app \(app) failed for good: see `pushd channels list --app \(app)`")
            }
            if status.jobsRetrying > 0 {
                notes.append("\(status.jobsRetrying) broadcast job(s) of app \(app) wait for a retry"
                             + (status.lastJobError.map { " (last error: \($0))" } ?? ""))
            }
        }
        for app in coverage.appsWithoutTokenKey { notes.append(FleetCoverage.noTokenKeyNote(app: app)) }
        let dead = deadLetters.reduce(0) { $0 + $1.count }
        if dead > 0 {
            notes.append("\(dead) notification(s) dead-lettered in the last hour: see pushd.dead_jobs")
        }
        self.problems = problems
        self.notes = notes
    }

    /// The problem a database that takes no writes is, nil when it takes them. Every lane's
    /// claims, outcomes and checkpoints are writes, and so are the heartbeats.
    static func readOnlyProblem(_ writability: DatabaseWritability) -> String? {
        guard let cause = writability.cause else { return nil }
        return cause + ": pushd can record nothing (no heartbeat, claim, outcome or checkpoint) and sends nothing until it takes writes again; "
            + "the lanes' workers fail with SQLSTATE 25006 (lane_stuck log lines, pushd_lane_stuck, /readyz)"
            + (writability == .inRecovery ? "; point database.url at the primary, or promote this server" : "")
    }

    /// Why `row`, a running campaign of a served app, has had no worker on its chunks: only
    /// what the snapshot shows. Workers busy with other campaigns' chunks is the cause only when
    /// another campaign of an app the same instances serve has chunks being sent; with none, the
    /// workers are not taking chunks at all (most often they cannot reach the database), and
    /// more workers would not help.
    /// The lanes an `apns_unavailable` entry may name.
    static let laneNames = Lane.allCases.map(\.rawValue) + [BroadcastWorker.lane, BroadcastWorker.channelsLane]

    /// An app's `apns_unavailable` text split into its entries ("campaign lane in sandbox: …",
    /// "broadcast lane cannot connect to sandbox: …"), joined by "; ": a piece that does not
    /// start with a lane's name belongs to the entry before it (an error text with "; " in it,
    /// as OpenSSL's queued errors are joined).
    static func entries(ofAPNsUnavailable detail: String) -> [String] {
        var entries: [String] = []
        for piece in detail.pieces(separatedBy: "; ") {
            if let last = entries.last, !Self.laneNames.contains(where: { piece.hasPrefix($0 + " lane") }) {
                entries[entries.count - 1] = last + "; " + piece
            } else {
                entries.append(piece)
            }
        }
        return entries
    }

    static func waitingForWorkerCause(_ row: CampaignRow, campaigns: [CampaignRow], live: [InstanceRecord]) -> String {
        let progress = row.campaign.progress
        let servers = live.filter { $0.registration.apps.contains(progress.app) }
        if !servers.isEmpty, servers.allSatisfy({ $0.paused[progress.app] != nil }) {
            return "its app is paused on every live instance that serves it (see above); its chunks wait until sending resumes"
        }
        if servers.contains(where: { $0.apnsUnavailable[progress.app]?.contains(text: "\(Lane.campaign.rawValue) lane in ") == true }) {
            // CampaignWorker.stopWhileDown: left unleased on purpose, its targets in its chunks.
            return "APNs takes none of the app's notifications on the campaign lane (see above): a campaign whose chunks go to the "
                + "environment that is down waits for it, its unsent targets left in its chunks (a probe still goes), and is sent on "
                + "when APNs answers; more campaign workers would not help"
        }
        let busy = campaigns.filter { other in
            other.campaign.progress.id != progress.id && other.campaign.progress.status == .running && other.campaign.chunksSending > 0
                && servers.contains { $0.registration.apps.contains(other.campaign.progress.app) }
        }
        if !busy.isEmpty {
            let sending = busy.map { "\($0.campaign.progress.id) (\($0.campaign.chunksSending) chunk\($0.campaign.chunksSending == 1 ? "" : "s"))" }
            return "every campaign worker that serves the app is busy with other campaigns' chunks (leased oldest campaign first; "
                + "being sent: campaign \(sending.joined(separator: ", "))); more campaign workers (workers.campaign) or instances send it sooner"
        }
        var cause = "no other campaign has a chunk being sent, so the campaign workers that serve the app are not taking chunks: "
            + "most likely they cannot reach the database or fail on it (their instances log `campaign worker N:` warnings and count "
            + "pushd_database_errors_total; /readyz says whether the database answers); more campaign workers would not help"
        let late = servers.filter { $0.silentSeconds > lateHeartbeatSeconds }
        if !late.isEmpty {
            cause += "; the heartbeat of \(late.map { "\($0.registration.id) is \(TimeText.duration($0.silentSeconds))" }.joined(separator: ", ")) old "
                + "(one every \(TimeText.duration(InstanceStore.heartbeatSeconds))): not reaching the database either"
        }
        return cause
    }

    // MARK: Text

    func lines(now: Timestamp) -> [String] {
        var lines = ["pushd status at \(TimeText.moment(now)): \(healthy ? "HEALTHY" : "DEGRADED")"]
        lines += problems.map { "  problem: \($0)" }
        lines += notes.map { "  note: \($0)" }

        let alive = instances.filter(\.alive).count
        lines += ["", "Instances: \(alive) alive, \(instances.count - alive) gone"]
        if !instances.isEmpty {
            lines += TextTable.render([["INSTANCE", "STATE", "VERSION", "LIBCURL", "APPS", "HEARTBEAT", "STARTED"]] + instances.map { instance in
                let registration = instance.record.registration
                return [registration.id, instance.alive ? "alive" : "gone", registration.version, registration.libcurlVersion,
                        registration.apps.joined(separator: ","), "\(TimeText.duration(instance.record.silentSeconds)) ago",
                        TimeText.moment(registration.startedAt)]
            }).map { "  " + $0 }
        }

        lines += ["", "Credentials by live instance and app (\"left\": work it leaves to other instances)"]
        if coverage.rows.isEmpty {
            lines.append("  none")
        } else {
            lines += TextTable.render([["INSTANCE", "APP", "ENVIRONMENTS", "TOKEN KEY", "LEFT TO OTHERS"]] + coverage.rows.map { row in
                [row.instance, row.app, row.environments.map { $0.isEmpty ? "none" : $0.joined(separator: ",") } ?? "not advertised (older version: all)",
                 row.token.map { $0 ? "yes" : "no" } ?? "-",
                 row.leftToOthers.isEmpty ? "-" : row.leftToOthers.map(\.what).joined(separator: ",")]
            }).map { "  " + $0 }
        }

        lines += ["", "Queue"]
        if queue.isEmpty {
            lines.append("  empty")
        } else {
            lines += TextTable.render([["APP", "LANE", "DUE", "SCHEDULED", "REFUSED", "OLDEST", "SERVED"]] + queue.map { row in
                [row.app, row.lane, String(row.due), String(row.scheduled), row.lane == "campaign" ? String(row.refused) : "-",
                 row.due > 0 ? TimeText.duration(row.oldestDueSeconds) : "-", row.served ? "yes" : "NO"]
            }).map { "  " + $0 }
        }

        lines += ["", "Campaigns"]
        if campaigns.isEmpty {
            lines.append("  none scheduled, running or paused")
        } else {
            lines += TextTable.render([["ID", "APP", "STATUS", "PROCESSED", "TARGETS", "DONE", "RATE", "CAP", "SENDING", "START", "NAME"]] + campaigns.map { row in
                let progress = row.campaign.progress
                return [String(progress.id), progress.app, progress.refusedBy == nil ? progress.status.rawValue : "refused",
                        String(row.processed), String(progress.targets),
                        row.percent.fixed(1) + "%", Self.rateText(row),
                        row.campaign.rateLimit.map { "\($0)/s" } ?? "-",
                        progress.status == .running ? "\(row.campaign.chunksSending) chunk\(row.campaign.chunksSending == 1 ? "" : "s")" : "-",
                        Self.startText(row, now: now), progress.name]
            }).map { "  " + $0 }
        }

        lines += ["", "Broadcast channels and jobs"]
        if broadcast.isEmpty {
            lines.append("  none")
        } else {
            lines += TextTable.render([["APP", "ACTIVE", "CREATING", "DELETING", "FAILED", "JOBS DUE", "SCHEDULED", "RETRYING",
                                        "OLDEST", "DEAD 1H", "SERVED"]] + broadcast.map { status, served in
                [status.app, String(status.activeChannels), String(status.pendingCreates), String(status.pendingDeletes),
                 String(status.failedChannels), String(status.jobsDue), String(status.jobsScheduled), String(status.jobsRetrying),
                 status.jobsDue > 0 ? TimeText.duration(status.oldestDueJobSeconds) : "-", String(status.deadLastHour),
                 served ? "yes" : "NO"]
            }).map { "  " + $0 }
        }

        lines += ["", "Dead letters in the last hour"]
        if deadLetters.isEmpty {
            lines.append("  none")
        } else {
            lines += TextTable.render([["APP", "REASON", "COUNT"]] + deadLetters.map { [$0.app, $0.reason, String($0.count)] }).map { "  " + $0 }
        }

        lines += ["", "Paused apps and held scopes"]
        if paused.isEmpty {
            lines.append("  none")
        } else {
            lines += TextTable.render([["APP", "SCOPE", "INSTANCE", "REASON"]]
                                      + paused.map { [$0.app, $0.scope ?? "all sending", $0.instance, $0.reason] }).map { "  " + $0 }
        }
        return lines
    }

    /// The START column: when a scheduled campaign starts (and in how long), or when a started
    /// one started; "-" when neither is known.
    static func startText(_ row: CampaignRow, now: Timestamp) -> String {
        if row.campaign.progress.status == .scheduled, let startAt = row.campaign.startAt {
            let seconds = startAt.timeIntervalSince1970 - now.timeIntervalSince1970
            return TimeText.moment(startAt) + (!row.campaign.progress.startsLater ? " (due)" : " (in \(TimeText.duration(max(seconds, 0))))")
        }
        guard let running = row.campaign.runningSeconds else { return "-" }
        return TimeText.moment(Timestamp(timeIntervalSince1970: now.timeIntervalSince1970 - running))
    }

    /// The RATE column: the average since the campaign started while it is being sent now
    /// (`CampaignRow.sendingNow`); "none now" for a running campaign nothing is sending, whose
    /// average would pass for a current rate.
    static func rateText(_ row: CampaignRow) -> String {
        guard let rate = row.averageRate else { return "-" }
        if row.sendingNow || row.campaign.progress.status != .running { return rate.fixed(0) + "/s" }
        return "none now"
    }

    /// The entries of `registration`'s `environments` that say what it sends ("app/environment",
    /// "app/token"), without those naming its apps' configured environments.
    static func sendableEntries(_ registration: InstanceRegistration) -> [String]? {
        registration.environments?.filter { entry in
            !(entry.split(separator: "/", maxSplits: 1).last?.hasPrefix(InstanceRegistration.homeEntryPrefix) ?? false)
        }
    }

    /// App → the configured environment `registration` advertises for it; nil when it
    /// advertises none (an earlier version).
    static func configuredEnvironments(_ registration: InstanceRegistration) -> [String: String]? {
        let homes = registration.apps.compactMap { app in registration.home(of: app).map { (app, $0) } }
        return homes.isEmpty ? nil : Dictionary(homes, uniquingKeysWith: { first, _ in first })
    }

    // MARK: JSON

    /// The same facts for `--json`; times are ISO 8601 in UTC.
    struct JSONReport: Encodable {
        struct Instance: Encodable {
            var id, host: String
            var pid: Int
            var state, version, libcurlVersion: String
            var apps: [String]
            var paused: [String: String]
            var apnsUnavailable: [String: String]
            /// As advertised in `pushd.instances.environments`: "app/environment" and "app/token"; absent for an earlier version.
            var environments: [String]?
            /// App → its configured environment (`apps[].environment`), as advertised; absent for an earlier version.
            var configuredEnvironments: [String: String]?
            var leftToOtherInstances: [LeftToOthers]
            var startedAt, lastHeartbeatAt: String
            var silentSeconds: Double
            enum CodingKeys: String, CodingKey {
                case id, host, pid, state, version, apps, paused, environments
                case apnsUnavailable = "apns_unavailable", leftToOtherInstances = "left_to_other_instances"
                case configuredEnvironments = "configured_environments"
                case libcurlVersion = "libcurl_version", startedAt = "started_at"
                case lastHeartbeatAt = "last_heartbeat_at", silentSeconds = "silent_seconds"
            }
        }
        /// One gap of an instance another live instance fills: `what` is an environment or "token".
        struct LeftToOthers: Encodable {
            var app, what, reason: String
        }
        struct Queue: Encodable {
            var app, lane: String
            var due, scheduled: Int
            var oldestDueSeconds: Double
            var served: Bool
            /// Campaign lane only: remaining targets of campaigns a CHECK holds.
            var refused: Int?
            enum CodingKeys: String, CodingKey {
                case app, lane, due, scheduled, served, refused, oldestDueSeconds = "oldest_due_seconds"
            }
        }
        struct Campaign: Encodable {
            var id: Int64
            var app, name, status: String
            var targets, sent, failed, pruned: Int
            var percent: Double
            var averageRate: Double?
            var rateLimit: Int?
            var chunksSending: Int
            /// `CampaignRow.sendingNow`: false while `average_rate` is history, not a current rate.
            var sendingNow: Bool
            var waitingForWorkerSeconds: Double?
            /// When it is to start (`start_at`); absent when it was started at once.
            var startAt: String?
            enum CodingKeys: String, CodingKey {
                case id, app, name, status, targets, sent, failed, pruned, percent, startAt = "start_at"
                case averageRate = "average_rate", rateLimit = "rate_limit", chunksSending = "chunks_sending", sendingNow = "sending_now"
                case waitingForWorkerSeconds = "waiting_for_worker_seconds"
            }
        }
        struct DeadLetters: Encodable {
            var app, reason: String
            var count: Int
        }
        struct Paused: Encodable {
            var app, instance, reason: String
            /// nil when the whole app is paused; else the held scope.
            var scope: String?
        }
        struct Broadcast: Encodable {
            struct Channels: Encodable {
                var active, pendingCreate, pendingDelete, failed, retrying: Int
                var oldestDueSeconds: Double
                var lastOutcome: String?
                enum CodingKeys: String, CodingKey {
                    case active, failed, retrying
                    case pendingCreate = "pending_create", pendingDelete = "pending_delete"
                    case oldestDueSeconds = "oldest_due_seconds", lastOutcome = "last_outcome"
                }
            }
            struct Jobs: Encodable {
                var due, scheduled, retrying, deadLastHour: Int
                var oldestDueSeconds: Double
                var lastError: String?
                enum CodingKeys: String, CodingKey {
                    case due, scheduled, retrying
                    case deadLastHour = "dead_last_hour", oldestDueSeconds = "oldest_due_seconds", lastError = "last_error"
                }
            }
            var app: String
            var served: Bool
            var channels: Channels
            var jobs: Jobs
        }
        var checkedAt: String
        var healthy: Bool
        /// "yes", "read_only" or "in_recovery" (a standby): whether the database takes writes.
        var databaseWrites: String
        var problems, notes: [String]
        var instances: [Instance]
        var versions: [String]
        var queue: [Queue]
        var campaigns: [Campaign]
        var deadLettersLastHour: [DeadLetters]
        var pausedApps: [Paused]
        var broadcast: [Broadcast]
        enum CodingKeys: String, CodingKey {
            case healthy, problems, notes, instances, versions, queue, campaigns, broadcast
            case checkedAt = "checked_at", databaseWrites = "database_writes", deadLettersLastHour = "dead_letters_last_hour", pausedApps = "paused_apps"
        }
    }

    func jsonReport(now: Timestamp) -> JSONReport {
        let time = { (date: Timestamp) in date.iso8601 }
        return JSONReport(
            checkedAt: time(now), healthy: healthy,
            databaseWrites: writability == .writable ? "yes" : writability == .readOnly ? "read_only" : "in_recovery", problems: problems, notes: notes,
            instances: instances.map { instance in
                let registration = instance.record.registration
                let left = coverage.rows.filter { $0.instance == registration.id && instance.alive }.flatMap { row in
                    row.leftToOthers.map { JSONReport.LeftToOthers(app: row.app, what: $0.what, reason: $0.reason) }
                }
                return .init(id: registration.id, host: registration.host, pid: registration.pid,
                             state: instance.alive ? "alive" : "gone", version: registration.version,
                             libcurlVersion: registration.libcurlVersion, apps: registration.apps,
                             paused: instance.record.paused, apnsUnavailable: instance.record.apnsUnavailable,
                             environments: Self.sendableEntries(registration),
                             configuredEnvironments: Self.configuredEnvironments(registration),
                             leftToOtherInstances: left, startedAt: time(registration.startedAt),
                             lastHeartbeatAt: time(instance.record.heartbeatAt), silentSeconds: instance.record.silentSeconds)
            },
            versions: Array(Set(instances.filter(\.alive).map(\.record.registration.version))).sorted(),
            queue: queue.map { .init(app: $0.app, lane: $0.lane, due: $0.due, scheduled: $0.scheduled,
                                     oldestDueSeconds: $0.oldestDueSeconds, served: $0.served,
                                     refused: $0.lane == "campaign" ? $0.refused : nil) },
            campaigns: campaigns.map { row in
                let progress = row.campaign.progress
                return .init(id: progress.id, app: progress.app, name: progress.name, status: progress.status.rawValue,
                             targets: progress.targets, sent: progress.sent, failed: progress.failed, pruned: progress.pruned,
                             percent: row.percent, averageRate: row.averageRate, rateLimit: row.campaign.rateLimit,
                             chunksSending: row.campaign.chunksSending, sendingNow: row.sendingNow,
                             waitingForWorkerSeconds: row.campaign.waitingForWorkerSeconds, startAt: row.campaign.startAt.map(time))
            },
            deadLettersLastHour: deadLetters.map { .init(app: $0.app, reason: $0.reason, count: $0.count) },
            pausedApps: paused.map { .init(app: $0.app, instance: $0.instance, reason: $0.reason, scope: $0.scope) },
            broadcast: broadcast.map { status, served in
                .init(app: status.app, served: served,
                      channels: .init(active: status.activeChannels, pendingCreate: status.pendingCreates,
                                      pendingDelete: status.pendingDeletes, failed: status.failedChannels,
                                      retrying: status.retryingChannelOperations,
                                      oldestDueSeconds: status.oldestDueChannelOperationSeconds, lastOutcome: status.lastChannelError),
                      jobs: .init(due: status.jobsDue, scheduled: status.jobsScheduled, retrying: status.jobsRetrying,
                                  deadLastHour: status.deadLastHour, oldestDueSeconds: status.oldestDueJobSeconds,
                                  lastError: status.lastJobError))
            })
    }

    /// The `--json` text: one line per sample with `--watch`, indented otherwise.
    func json(now: Timestamp, pretty: Bool) throws -> String {
        var encoder = JSONValueEncoder()
        encoder.sortedKeys = true
        let value = try encoder.encode(jsonReport(now: now))
        return pretty ? value.prettyText : String(decoding: value.compactBytes, as: UTF8.self)
    }
}
