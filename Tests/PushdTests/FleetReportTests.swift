import Foundation
import Posix
import QueueStore
import Testing
@testable import pushd

/// The rules that make `pushd status` exit 1, on plain snapshots.
@Suite struct FleetReportTests {
    static func instance(_ host: String, apps: [String] = ["shop"], version: String = "1.0.0", silent: Double = 2,
                         paused: [String: String] = [:], environments: [String]? = nil) -> InstanceRecord {
        InstanceRecord(registration: InstanceRegistration(host: host, pid: 10, version: version, libcurlVersion: "8.14.1",
                                                          apps: apps, environments: environments,
                                                          startedAt: Timestamp(timeIntervalSince1970: 1_700_000_000)),
                       paused: paused, heartbeatAt: Timestamp(), silentSeconds: silent)
    }

    static func snapshot(_ instances: [InstanceRecord], lanes: [LaneDepth] = [], campaigns: [ActiveCampaign] = [],
                         dead: [DeadLetterCount] = []) -> FleetSnapshot {
        FleetSnapshot(instances: instances, lanes: lanes, campaigns: campaigns, deadLettersLastHour: dead)
    }

    @Test func twoLiveInstancesWithTheSameAppsAndAServedQueueAreHealthy() {
        let report = FleetReport(Self.snapshot([Self.instance("a"), Self.instance("b")],
                                               lanes: [LaneDepth(lane: .transactional, app: "shop", due: 3, scheduled: 1, oldestAge: 0.4)]))
        #expect(report.problems == [])
        #expect(report.exitCode == 0)
        #expect(report.queue.first?.served == true)
        #expect(report.lines(now: Timestamp()).first?.hasSuffix("HEALTHY") == true)
    }

    @Test func noLiveInstanceIsDegraded() {
        let report = FleetReport(Self.snapshot([]))
        #expect(report.problems == ["no live pushd instance: nothing is being sent"])
        #expect(report.exitCode == 1)
    }

    @Test func anInstanceSilentForOverAMinuteIsGoneAndDegrades() {
        let report = FleetReport(Self.snapshot([Self.instance("a"), Self.instance("b", silent: 61)]))
        #expect(report.instances.map(\.alive) == [true, false])
        #expect(report.problems.count == 1)
        #expect(report.problems.first?.hasPrefix("instance b/10 (1.0.0) has been silent for") == true)
        #expect(FleetReport(Self.snapshot([Self.instance("a"), Self.instance("b", silent: 59)])).healthy)
    }

    @Test func differentAppSetsAmongLiveInstancesDegradeButAGoneInstanceDoesNotCount() {
        let mixed = FleetReport(Self.snapshot([Self.instance("a"), Self.instance("b", apps: ["shop", "news"])]))
        #expect(mixed.problems == ["instances serve different app sets: [news,shop] on b/10; [shop] on a/10"])
        let withGone = FleetReport(Self.snapshot([Self.instance("a"), Self.instance("b", apps: ["news"], silent: 120)]))
        #expect(!withGone.problems.contains { $0.contains("app sets") })
    }

    /// Two live instances with different `environment` for one app send its notifications that
    /// name no environment to both hosts: DEGRADED, naming the app, each environment and its
    /// instances. An earlier version that advertises none is not counted.
    @Test func liveInstancesThatDisagreeOnAnAppsEnvironmentDegrade() {
        func home(_ environment: String) -> [String] {
            ["shop/\(environment)", InstanceRegistration.homeEntry(app: "shop", environment: environment)]
        }
        let report = FleetReport(Self.snapshot([Self.instance("a", environments: home("sandbox")), Self.instance("b", environments: home("production")),
                                                Self.instance("c", environments: home("production")), Self.instance("d")]))
        #expect(report.problems.count == 1)
        #expect(report.problems.first?.hasPrefix("instances disagree on the environment of app shop: production on b/10, c/10; sandbox on a/10;") == true,
                "\(report.problems)")
        #expect(FleetReport(Self.snapshot([Self.instance("a", environments: home("sandbox")), Self.instance("b", environments: home("sandbox"))])).healthy)
        #expect(FleetReport(Self.snapshot([Self.instance("a", environments: home("sandbox")),
                                           Self.instance("b", silent: 120, environments: home("production"))])).problems.allSatisfy { !$0.contains("disagree") })
    }

    @Test func dueWorkOfAnAppNoLiveInstanceServesDegrades() {
        let campaign = ActiveCampaign(progress: CampaignProgress(id: 4, app: "news", name: "spring", status: .running, targets: 1000,
                                                                 sent: 100, failed: 0, pruned: 0),
                                      rateLimit: 50, runningSeconds: 10)
        let report = FleetReport(Self.snapshot([Self.instance("a")], lanes: [
            LaneDepth(lane: .transactional, app: "news", due: 5, scheduled: 0, oldestAge: 3),
            LaneDepth(lane: .transactional, app: "shop", due: 0, scheduled: 9, oldestAge: 0),
        ], campaigns: [campaign]))
        #expect(report.problems == ["905 due notification(s) of app news, which no live instance serves, are waiting"])
        #expect(report.queue.map(\.served) == [false, true])
        #expect(report.campaigns.first?.averageRate == 10)
        #expect(report.campaigns.first?.percent == 10)
    }

    /// A served running campaign degrades once it has waited `CampaignWaitWatch.reportAfter`
    /// for a worker; a shorter wait (between two leases) and an unserved app's (reported as
    /// unserved work) do not add this problem.
    @Test func aCampaignWaitingForAWorkerDegradesOnceItHasWaitedLongEnough() {
        func campaign(_ id: Int64, app: String, waiting: Double?) -> ActiveCampaign {
            ActiveCampaign(progress: CampaignProgress(id: id, app: app, name: "c\(id)", status: .running, targets: 10,
                                                      sent: 0, failed: 0, pruned: 0),
                           rateLimit: nil, runningSeconds: 60, chunksSending: 0, waitingForWorkerSeconds: waiting)
        }
        var sending = campaign(2, app: "shop", waiting: nil)
        sending.chunksSending = 2
        let report = FleetReport(Self.snapshot([Self.instance("a")], campaigns: [
            campaign(1, app: "shop", waiting: 35), sending, campaign(3, app: "news", waiting: 300), campaign(4, app: "shop", waiting: 2),
        ]))
        #expect(report.problems.filter { $0.contains("no worker sending") } == [
            "campaign 1 of app shop has had chunks to send and no worker sending any for 35s: every campaign worker that serves "
                + "the app is busy with other campaigns' chunks (leased oldest campaign first; being sent: campaign 2 (2 chunks)); "
                + "more campaign workers (workers.campaign) or instances send it sooner",
        ])
        #expect(report.problems.contains("10 due notification(s) of app news, which no live instance serves, are waiting"))
    }

    /// The only campaign waiting for a worker: no other campaign's chunks keep the workers
    /// busy, so they are not taking chunks at all (cut off from the database, as when the
    /// role's connection limit is reached). Advising more workers would make that worse.
    @Test func aCampaignWaitingWhileNoOtherCampaignIsSentDoesNotBlameBusyWorkers() {
        let waiting = ActiveCampaign(progress: CampaignProgress(id: 7, app: "shop", name: "spring", status: .running, targets: 10,
                                                                sent: 0, failed: 0, pruned: 0),
                                     rateLimit: nil, runningSeconds: 60, chunksSending: 0, waitingForWorkerSeconds: 40)
        let other = ActiveCampaign(progress: CampaignProgress(id: 8, app: "news", name: "autumn", status: .running, targets: 10,
                                                              sent: 0, failed: 0, pruned: 0),
                                   rateLimit: nil, runningSeconds: 60, chunksSending: 3)
        // A campaign of an app no instance serving shop serves keeps no worker of shop busy.
        let report = FleetReport(Self.snapshot([Self.instance("a"), Self.instance("b", apps: ["news"])], campaigns: [waiting, other]))
        let problem = report.problems.first { $0.hasPrefix("campaign 7 ") }
        #expect(problem == "campaign 7 of app shop has had chunks to send and no worker sending any for 40s: no other campaign has a chunk "
                + "being sent, so the campaign workers that serve the app are not taking chunks: most likely they cannot reach the database "
                + "or fail on it (their instances log `campaign worker N:` warnings and count pushd_database_errors_total; /readyz says "
                + "whether the database answers); more campaign workers would not help")
        #expect(report.problems.allSatisfy { !$0.contains("busy with other campaigns") }, "\(report.problems)")

        // An instance serving the app that has missed heartbeats is named with the cause.
        let late = FleetReport(Self.snapshot([Self.instance("a", silent: 25)], campaigns: [waiting]))
        let lateProblem = late.problems.first { $0.hasPrefix("campaign 7 ") } ?? ""
        #expect(lateProblem.hasSuffix("more campaign workers would not help; the heartbeat of a/10 is 25s old (one every 5s): not reaching the database either"),
                "\(late.problems)")
        #expect(late.notes.contains("instance a/10 last wrote its heartbeat 25s ago (one every 5s): it does not reach the database now, or is stalled; "
                                    + "it is shown as gone after 1m00s"), "\(late.notes)")

        // Paused on every instance that serves it: that is why.
        let paused = FleetReport(Self.snapshot([Self.instance("a", paused: ["shop": "InvalidProviderToken"])], campaigns: [waiting]))
        #expect(paused.problems.contains { $0.hasPrefix("campaign 7 ") && $0.hasSuffix("its app is paused on every live instance that serves it (see above); its chunks wait until sending resumes") },
                "\(paused.problems)")

        // APNs takes none of the app's notifications on the campaign lane: the campaign waits for it.
        var down = Self.instance("a")
        down.apnsUnavailable = ["shop": "campaign lane in production: HTTP 503 ServiceUnavailable"]
        let outage = FleetReport(Self.snapshot([down], campaigns: [waiting]))
        let outageProblem = outage.problems.first { $0.hasPrefix("campaign 7 ") } ?? ""
        #expect(outageProblem.hasSuffix("APNs takes none of the app's notifications on the campaign lane (see above): a campaign whose chunks go to the "
                                        + "environment that is down waits for it, its unsent targets left in its chunks (a probe still goes), and is sent on "
                                        + "when APNs answers; more campaign workers would not help"), "\(outage.problems)")
    }

    /// The RATE column is the average since the start: shown while the campaign is being sent,
    /// "none now" while no worker has a chunk of it or every instance serving it has missed
    /// heartbeats (its leases outlive a database it cannot reach), where it used to pass for a
    /// current rate.
    @Test func anAverageRateIsNotShownAsCurrentWhileNothingSendsTheCampaign() {
        func campaign(sending: Int, waiting: Double?) -> ActiveCampaign {
            ActiveCampaign(progress: CampaignProgress(id: 5, app: "shop", name: "spring", status: .running, targets: 100_000,
                                                      sent: 56_400, failed: 0, pruned: 0),
                           rateLimit: nil, runningSeconds: 100, chunksSending: sending, waitingForWorkerSeconds: waiting)
        }
        func rate(_ report: FleetReport) -> String? {
            report.lines(now: Timestamp()).first { $0.hasSuffix(" spring") }?.split(separator: " ").dropFirst(6).prefix(2).joined(separator: " ")
        }
        let sending = FleetReport(Self.snapshot([Self.instance("a")], campaigns: [campaign(sending: 2, waiting: nil)]))
        #expect(rate(sending)?.hasPrefix("564/s") == true, "\(sending.lines(now: Timestamp()))")

        let cutOff = FleetReport(Self.snapshot([Self.instance("a", silent: 30)], campaigns: [campaign(sending: 2, waiting: nil)]))
        #expect(rate(cutOff) == "none now", "\(cutOff.lines(now: Timestamp()))")

        let waiting = FleetReport(Self.snapshot([Self.instance("a")], campaigns: [campaign(sending: 0, waiting: 20)]))
        #expect(rate(waiting) == "none now", "\(waiting.lines(now: Timestamp()))")
        let json = (try? waiting.json(now: Timestamp(), pretty: false)) ?? ""
        #expect(json.contains("\"sending_now\":false"), "\(json)")
    }

    @Test func scheduledJobsOfAnUnservedAppAloneDoNotDegrade() {
        let report = FleetReport(Self.snapshot([Self.instance("a")], lanes: [
            LaneDepth(lane: .transactional, app: "news", due: 0, scheduled: 4, oldestAge: 0),
        ]))
        #expect(report.healthy)
    }

    @Test func aPausedAppDegradesAndNamesItsInstanceAndReason() {
        let report = FleetReport(Self.snapshot([Self.instance("a", paused: ["shop": "InvalidProviderToken"]), Self.instance("b")]))
        #expect(report.paused == [FleetReport.PausedApp(app: "shop", reason: "InvalidProviderToken", instance: "a/10")])
        #expect(report.problems == ["app shop is paused on a/10: InvalidProviderToken"])
    }

    /// A lane that cannot set up its connections rides in `apns_unavailable` beside the
    /// outages: listed as this host's failure, not as APNs's, even when its error text has the
    /// entries' separator "; " in it (OpenSSL's queued errors are joined so).
    @Test func aLaneThatCannotConnectIsNotCalledAnAPNsOutage() {
        var record = Self.instance("a")
        record.apnsUnavailable = ["shop": "campaign lane in sandbox: HTTP 503 ServiceUnavailable; "
                                  + "broadcast lane cannot connect to production: cannot load the certificate: error A; error B"]
        let report = FleetReport(Self.snapshot([record]))
        #expect(report.problems == [
            "APNs is not taking notifications of app shop on a/10: campaign lane in sandbox: HTTP 503 ServiceUnavailable",
            "app shop cannot connect to APNs on a/10, its notifications are kept: broadcast lane cannot connect to production: cannot load the certificate: error A; error B",
        ], "\(report.problems)")
        #expect(report.exitCode == 1)
    }

    /// A held scope travels in the heartbeat's `paused` map as "app scope": it degrades the
    /// fleet, and is shown as a scope of its app rather than as an app of that name.
    @Test func aHeldScopeDegradesAndIsShownAsAScopeOfItsApp() throws {
        let why = "APNs does not allow the app's credentials to push to this topic (TopicDisallowed); check the app's bundle_id"
        let report = FleetReport(Self.snapshot([Self.instance("a", paused: ["shop topic com.example.shop.voip (production)": why]),
                                                Self.instance("b")]))
        #expect(report.paused == [FleetReport.PausedApp(app: "shop", scope: "topic com.example.shop.voip (production)", reason: why,
                                                        instance: "a/10")])
        #expect(report.problems == ["app shop: sending of topic com.example.shop.voip (production) is held on a/10, its notifications are kept: \(why)"])
        let lines = report.lines(now: Timestamp(timeIntervalSince1970: 1_800_000_000))
        #expect(lines.contains { $0.contains("shop") && $0.contains("topic com.example.shop.voip (production)") && $0.contains("a/10") })
        let json = try report.json(now: Timestamp(timeIntervalSince1970: 1_800_000_000), pretty: false)
        #expect(json.contains(#""scope":"topic com.example.shop.voip (production)""#))
    }

    @Test func transactionalJobsDueForOverAMinuteDegrade() {
        let late = FleetReport(Self.snapshot([Self.instance("a")], lanes: [
            LaneDepth(lane: .transactional, app: "shop", due: 2, scheduled: 0, oldestAge: 75),
            LaneDepth(lane: .campaign, app: "shop", due: 20_000, scheduled: 0, oldestAge: 3600),
        ]))
        #expect(late.problems == ["transactional jobs of app shop have been due for 1m15s"])
    }

    @Test func mixedVersionsAndDeadLettersAreNotesNotProblems() throws {
        let report = FleetReport(Self.snapshot([Self.instance("a", version: "1.0.0"), Self.instance("b", version: "1.1.0")],
                                               dead: [DeadLetterCount(app: "shop", reason: "BadTopic", count: 3)]))
        #expect(report.healthy)
        #expect(report.notes == ["instances run different versions (1.0.0, 1.1.0): expected during a rolling upgrade only",
                                 "3 notification(s) dead-lettered in the last hour: see pushd.dead_jobs"])
        let text = try report.json(now: Timestamp(timeIntervalSince1970: 0), pretty: false)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(json["healthy"] as? Bool == true)
        #expect(json["versions"] as? [String] == ["1.0.0", "1.1.0"])
        #expect(json["checked_at"] as? String == "1970-01-01T00:00:00Z")
        #expect((json["dead_letters_last_hour"] as? [[String: Any]])?.first?["count"] as? Int == 3)
    }

    /// A certificate-only instance beside one with a token key and both certificates (a move
    /// to a token key, one instance at a time): each row says what the instance advertises,
    /// and the certificate one leaves its sandbox and token work to the other.
    @Test func eachLiveInstanceShowsWhatItAdvertisesAndWhatItLeavesToTheOthers() throws {
        let report = FleetReport(Self.snapshot([
            Self.instance("a", environments: ["shop/production"]),
            Self.instance("b", environments: ["shop/production", "shop/sandbox", "shop/token"]),
        ]))
        #expect(report.healthy && report.notes.isEmpty, "\(report.problems) \(report.notes)")
        let rows = report.coverage.rows
        #expect(rows.map(\.instance) == ["a/10", "b/10"])
        #expect(rows.map(\.environments) == [["production"], ["production", "sandbox"]])
        #expect(rows.map(\.token) == [false, true])
        #expect(rows[0].leftToOthers == [FleetCoverage.Left(what: "sandbox", reason: "NoCredentialsForEnvironment"),
                                         FleetCoverage.Left(what: "token", reason: "TokenAuthenticationRequired")])
        #expect(rows[1].leftToOthers.isEmpty)
        let lines = report.lines(now: Timestamp(timeIntervalSince1970: 1_800_000_000))
        let table = lines.map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        #expect(table.contains(["a/10", "shop", "production", "no", "sandbox,token"]), "\(lines.joined(separator: "\n"))")
        #expect(table.contains(["b/10", "shop", "production,sandbox", "yes", "-"]), "\(lines.joined(separator: "\n"))")

        let text = try report.json(now: Timestamp(timeIntervalSince1970: 0), pretty: false)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let instances = json["instances"] as? [[String: Any]] ?? []
        #expect(instances.first?["environments"] as? [String] == ["shop/production"])
        let left = instances.first?["left_to_other_instances"] as? [[String: String]]
        #expect(left == [["app": "shop", "what": "sandbox", "reason": "NoCredentialsForEnvironment"],
                         ["app": "shop", "what": "token", "reason": "TokenAuthenticationRequired"]], "\(text)")
        #expect((instances.last?["left_to_other_instances"] as? [Any])?.isEmpty == true)
    }

    /// Gaps no other live instance fills are not "left": the work is dead-lettered, and for
    /// token work that is a note naming the setting; a gone instance's key does not count, and
    /// an instance of an earlier version (no environments) takes all work of its apps.
    @Test func anAppNoLiveInstanceHasATokenKeyForIsANoteAndAGoneInstancesKeyDoesNotCount() {
        let report = FleetReport(Self.snapshot([
            Self.instance("a", apps: ["news", "shop"], environments: ["news/production", "news/token", "shop/production"]),
            Self.instance("b", apps: ["news", "shop"], silent: 120, environments: ["shop/production", "shop/token"]),
        ]))
        #expect(report.notes == [FleetCoverage.noTokenKeyNote(app: "shop")])
        #expect(report.notes.first?.contains("no live instance has a token key for app shop") == true)
        #expect(report.coverage.rows.map(\.instance) == ["a/10", "a/10"])
        #expect(report.coverage.rows.allSatisfy { $0.leftToOthers.isEmpty })
        #expect(report.problems.count == 1, "\(report.problems)")

        let older = FleetReport(Self.snapshot([Self.instance("a", environments: ["shop/production"]), Self.instance("b")]))
        #expect(older.notes.isEmpty)
        #expect(older.coverage.rows.map(\.token) == [false, nil])
        #expect(older.coverage.rows.first?.leftToOthers.map(\.what) == ["sandbox", "token"])
        #expect(older.lines(now: Timestamp()).contains { $0.contains("not advertised (older version: all)") })
    }
}
