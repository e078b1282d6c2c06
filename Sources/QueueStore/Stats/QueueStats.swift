import Posix

/// Depth of one lane for one app.
public struct LaneDepth: Sendable, Hashable {
    public enum Lane: String, Sendable, Hashable { case transactional, campaign, broadcast }
    public var lane: Lane
    public var app: String
    /// Due now or held (jobs), or due targets (`CampaignProgress.due`: remaining targets of
    /// running campaigns and of scheduled ones whose start time has come; a paused campaign's
    /// are not due, nor a refused one's).
    public var depth: Int
    /// Jobs whose run_at is in the future, held ones left out; remaining targets of campaigns
    /// scheduled to start later.
    public var scheduled: Int
    /// Seconds since the oldest due job became due (a held one: since its insert), or since the
    /// oldest due campaign became due (`CampaignProgress.decode`: its start time, or when it started).
    public var oldestAge: Double
    /// Remaining targets of campaigns held because a CHECK refuses to write their row
    /// (`CampaignProgress.refusedBy`): neither due nor scheduled, since nothing sends them until
    /// the hold ends. Always 0 on the job lanes.
    public var refused: Int = 0
}

/// Progress of a campaign that is not over.
public struct CampaignProgress: Sendable, Hashable {
    public var id: Int64
    public var app: String
    public var name: String
    public var status: CampaignStatus
    public var targets: Int
    public var sent: Int
    public var failed: Int
    public var pruned: Int
    /// The CHECK that refuses to write its row, while the campaign is held for it (`CampaignRefusal`).
    /// Nothing of it is leased or sent meanwhile, so it is not due, whatever its status.
    public var refusedBy: String?
    /// Scheduled, and its start time (by the database's clock) has not come.
    public var startsLater: Bool
    /// Targets not yet given an outcome (sent or failed), whether or not they may be sent now.
    /// `pushd_campaign_targets_remaining` is the sum of these per app.
    public var remaining: Int { max(0, targets - sent - failed) }
    /// Whether its remaining targets may be sent now: it is running, or scheduled and its start
    /// time has come (a worker starts it at its next turn), and no CHECK refuses its row. A
    /// paused campaign, one scheduled later, one over and one held for a refusal are not due.
    /// The campaign lane's depth and oldest age (`pushd_queue_app_depth`,
    /// `pushd_queue_app_oldest_age_seconds`, `pushd status`; the age from when it became due,
    /// `decode`) and the due work of an app no instance serves count due campaigns, and only those.
    public var due: Bool { refusedBy == nil && (status == .running || (status == .scheduled && !startsLater)) }

    public init(id: Int64, app: String, name: String, status: CampaignStatus, targets: Int, sent: Int,
                failed: Int, pruned: Int, refusedBy: String? = nil, startsLater: Bool = false) {
        self.refusedBy = refusedBy
        self.startsLater = startsLater
        self.id = id
        self.app = app
        self.name = name
        self.status = status
        self.targets = targets
        self.sent = sent
        self.failed = failed
        self.pruned = pruned
    }

    /// The campaigns not over, each with the counts of its refusal hold: every read of campaign
    /// progress selects `columns` from `source` where `notOver`.
    static let source = "pushd.campaigns c LEFT JOIN pushd.campaign_refusals h ON h.campaign_id = c.id"
    static let notOver = "c.status IN ('scheduled', 'running', 'paused')"
    /// Decoded by `decode(_:from:)`, in this order.
    static let columns = """
        c.id, c.app, c.name, c.status, c.targets, c.sent + coalesce(h.sent, 0), c.failed + coalesce(h.failed, 0),
        c.pruned + coalesce(h.pruned, 0), CASE WHEN h.campaign_id IS NOT NULL THEN coalesce(h.constraint_name, 'unnamed') END,
        coalesce(c.status = 'scheduled' AND c.start_at > now(), false), extract(epoch FROM now() - c.started_at)::float8,
        CASE WHEN c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now())
             THEN extract(epoch FROM now() - least(c.start_at, c.started_at))::float8 END
        """

    /// The `columns` of `row` from column `first` on, and beside them, by the database's clock:
    /// seconds since it started (nil before), and seconds since it became due: since its start
    /// time when it had one that has come (a scheduled campaign no worker has started yet, or
    /// started late), else since it was started; nil while it is neither running nor scheduled
    /// with its time come. Pauses are not taken out of either.
    static func decode(_ row: PGRow, from first: Int = 0) throws -> (progress: CampaignProgress, runningSeconds: Double?, dueSeconds: Double?) {
        let status: String = try row.require(first + 3)
        let progress = CampaignProgress(
            id: try row.require(first), app: try row.require(first + 1), name: try row.require(first + 2),
            status: CampaignStatus(rawValue: status) ?? .running, targets: try row.require(first + 4),
            sent: try row.require(first + 5), failed: try row.require(first + 6), pruned: try row.require(first + 7),
            refusedBy: try row.get(first + 8), startsLater: try row.require(first + 9))
        return (progress, try row.get(first + 10), try row.get(first + 11))
    }

    /// How many columns `columns` has.
    static let columnCount = 12
}

extension LaneDepth {
    /// The campaign lane of every app with a campaign not over: its due targets as depth, the
    /// remaining targets of campaigns scheduled later as scheduled, those of refused campaigns
    /// (whatever their status) as refused, a paused campaign's in none; its age since its
    /// oldest due campaign became due: one definition of due (`CampaignProgress.due`) for all.
    static func campaignLanes(_ campaigns: [(progress: CampaignProgress, dueSeconds: Double?)]) -> [LaneDepth] {
        Dictionary(grouping: campaigns, by: \.progress.app).map { app, campaigns in
            let due = campaigns.filter(\.progress.due)
            let progress = campaigns.map(\.progress)
            return LaneDepth(lane: .campaign, app: app,
                             depth: due.reduce(0) { $0 + $1.progress.remaining },
                             scheduled: progress.filter { $0.startsLater && $0.refusedBy == nil }.reduce(0) { $0 + $1.remaining },
                             oldestAge: due.compactMap(\.dueSeconds).max() ?? 0,
                             refused: progress.filter { $0.refusedBy != nil }.reduce(0) { $0 + $1.remaining })
        }
    }
}

/// Everything the metrics need from the database, read in one statement.
public struct QueueStats: Sendable, Hashable {
    public var lanes: [LaneDepth]
    public var campaigns: [CampaignProgress]

    /// Work put back for a held scope (`HeldWork`) waits until the hold ends, with a later
    /// run_at; it is counted as waiting (due), not as scheduled, and its age runs from its insert.
    static let held = "(run_at > now() AND starts_with(last_error, '\(HeldWork.errorPrefix)'))"

    /// A lane row: kind, app, due, scheduled, oldest age, then `CampaignProgress.columns`
    /// (NULL); a campaign row: 'progress', its app, three zeros, then its progress. The
    /// campaign lane is made from the progress rows (`LaneDepth.campaignLanes`), so it, the
    /// campaign lines and `pushd_campaign_targets_remaining` count from the same rows.
    static let sql = """
        SELECT 'transactional', app, count(*) FILTER (WHERE run_at <= now() OR \(held)),
               count(*) FILTER (WHERE run_at > now() AND NOT coalesce(\(held), false)),
               coalesce(extract(epoch FROM now() - least(min(run_at) FILTER (WHERE run_at <= now()),
                                                         min(created_at) FILTER (WHERE \(held)))), 0)::float8,
               NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
               NULL::text, NULL::boolean, NULL::float8, NULL::float8
        FROM pushd.jobs GROUP BY app
        UNION ALL
        SELECT 'broadcast', app, count(*) FILTER (WHERE run_at <= now() OR \(held)),
               count(*) FILTER (WHERE run_at > now() AND NOT coalesce(\(held), false)),
               coalesce(extract(epoch FROM now() - least(min(run_at) FILTER (WHERE run_at <= now()),
                                                         min(created_at) FILTER (WHERE \(held)))), 0)::float8,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM pushd.broadcast_jobs GROUP BY app
        UNION ALL
        SELECT 'progress', c.app, 0, 0, 0, \(CampaignProgress.columns)
        FROM \(CampaignProgress.source) WHERE \(CampaignProgress.notOver)
        """

    public static func read(_ connection: PGConnection) throws -> QueueStats {
        let result = try connection.query(connection.prepared(sql))
        var stats = QueueStats(lanes: [], campaigns: [])
        var campaigns = [(progress: CampaignProgress, dueSeconds: Double?)]()
        for row in result.rows {
            let kind: String = try row.require(0)
            if kind == "progress" {
                let (progress, _, dueSeconds) = try CampaignProgress.decode(row, from: 5)
                campaigns.append((progress, dueSeconds))
            } else {
                stats.lanes.append(LaneDepth(lane: LaneDepth.Lane(rawValue: kind) ?? .transactional,
                                             app: try row.require(1), depth: try row.require(2),
                                             scheduled: try row.require(3), oldestAge: try row.require(4)))
            }
        }
        stats.lanes += LaneDepth.campaignLanes(campaigns)
        stats.campaigns = campaigns.map(\.progress)
        stats.lanes.sort { ($0.lane.rawValue, $0.app) < ($1.lane.rawValue, $1.app) }
        stats.campaigns.sort { $0.id < $1.id }
        return stats
    }
}
