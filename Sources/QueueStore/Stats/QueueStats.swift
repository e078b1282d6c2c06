import Posix

/// Depth of one lane for one app.
public struct LaneDepth: Sendable, Hashable {
    public enum Lane: String, Sendable, Hashable { case transactional, campaign, broadcast }
    public var lane: Lane
    public var app: String
    /// Due now or held (jobs), or not yet sent (targets of running or paused campaigns, and of
    /// scheduled ones whose start time has come).
    public var depth: Int
    /// Jobs whose run_at is in the future, held ones left out; targets of campaigns scheduled
    /// to start later.
    public var scheduled: Int
    /// Seconds since the oldest due job became due (a held one: since its insert), or since the
    /// oldest running campaign started.
    public var oldestAge: Double
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
    public var refusedBy: String?
    public var remaining: Int { max(0, targets - sent - failed) }

    public init(id: Int64, app: String, name: String, status: CampaignStatus, targets: Int, sent: Int,
                failed: Int, pruned: Int, refusedBy: String? = nil) {
        self.refusedBy = refusedBy
        self.id = id
        self.app = app
        self.name = name
        self.status = status
        self.targets = targets
        self.sent = sent
        self.failed = failed
        self.pruned = pruned
    }
}

/// Everything the metrics need from the database, read in one statement.
public struct QueueStats: Sendable, Hashable {
    public var lanes: [LaneDepth]
    public var campaigns: [CampaignProgress]

    /// Work put back for a held scope (`HeldWork`) waits until the hold ends, with a later
    /// run_at; it is counted as waiting (due), not as scheduled, and its age runs from its insert.
    static let held = "(run_at > now() AND starts_with(last_error, '\(HeldWork.errorPrefix)'))"

    /// A campaign scheduled to start later: its targets are not due before `start_at`, so they
    /// count as scheduled, not as waiting (a backlog). Once `start_at` has come it counts as
    /// due, even before a worker has started it.
    static let notStarted = "(c.status = 'scheduled' AND coalesce(c.start_at > now(), false))"

    static let sql = """
        SELECT 'transactional', app, count(*) FILTER (WHERE run_at <= now() OR \(held)),
               count(*) FILTER (WHERE run_at > now() AND NOT coalesce(\(held), false)),
               coalesce(extract(epoch FROM now() - least(min(run_at) FILTER (WHERE run_at <= now()),
                                                         min(created_at) FILTER (WHERE \(held)))), 0)::float8,
               NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text
        FROM pushd.jobs GROUP BY app
        UNION ALL
        SELECT 'broadcast', app, count(*) FILTER (WHERE run_at <= now() OR \(held)),
               count(*) FILTER (WHERE run_at > now() AND NOT coalesce(\(held), false)),
               coalesce(extract(epoch FROM now() - least(min(run_at) FILTER (WHERE run_at <= now()),
                                                         min(created_at) FILTER (WHERE \(held)))), 0)::float8,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM pushd.broadcast_jobs GROUP BY app
        UNION ALL
        SELECT 'campaign', c.app,
               coalesce(sum(greatest(c.targets - c.sent - c.failed - coalesce(h.sent + h.failed, 0), 0)) FILTER (WHERE NOT \(notStarted)), 0)::bigint,
               coalesce(sum(greatest(c.targets - c.sent - c.failed - coalesce(h.sent + h.failed, 0), 0)) FILTER (WHERE \(notStarted)), 0)::bigint,
               coalesce(extract(epoch FROM now() - min(c.started_at) FILTER (WHERE c.status = 'running')), 0)::float8,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM pushd.campaigns c LEFT JOIN pushd.campaign_refusals h ON h.campaign_id = c.id
        WHERE c.status IN ('scheduled', 'running', 'paused') GROUP BY c.app
        UNION ALL
        SELECT 'progress', c.app, 0, 0, 0, c.id, c.name, c.status, c.targets,
               c.sent + coalesce(h.sent, 0), c.failed + coalesce(h.failed, 0), c.pruned + coalesce(h.pruned, 0),
               CASE WHEN h.campaign_id IS NOT NULL THEN coalesce(h.constraint_name, 'unnamed') END
        FROM pushd.campaigns c LEFT JOIN pushd.campaign_refusals h ON h.campaign_id = c.id
        WHERE c.status IN ('scheduled', 'running', 'paused')
        """

    public static func read(_ connection: PGConnection) throws -> QueueStats {
        let result = try connection.query(connection.prepared(sql))
        var stats = QueueStats(lanes: [], campaigns: [])
        for row in result.rows {
            let kind: String = try row.require(0)
            if kind == "progress" {
                let status: String = try row.require(7)
                stats.campaigns.append(CampaignProgress(
                    id: try row.require(5), app: try row.require(1), name: try row.require(6),
                    status: CampaignStatus(rawValue: status) ?? .running, targets: try row.require(8),
                    sent: try row.require(9), failed: try row.require(10), pruned: try row.require(11), refusedBy: try row.get(12)))
            } else {
                stats.lanes.append(LaneDepth(lane: LaneDepth.Lane(rawValue: kind) ?? .transactional,
                                             app: try row.require(1), depth: try row.require(2),
                                             scheduled: try row.require(3), oldestAge: try row.require(4)))
            }
        }
        stats.lanes.sort { ($0.lane.rawValue, $0.app) < ($1.lane.rawValue, $1.app) }
        stats.campaigns.sort { $0.id < $1.id }
        return stats
    }
}
