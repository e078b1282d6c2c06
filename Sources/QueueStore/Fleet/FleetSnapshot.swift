import Posix

/// A campaign that is scheduled, running or paused, with what its rate needs.
public struct ActiveCampaign: Sendable, Hashable {
    public var progress: CampaignProgress
    /// The configured cap in notifications per second, if any.
    public var rateLimit: Int?
    /// Seconds since it started; nil while scheduled.
    public var runningSeconds: Double?
    /// When it is to start (`start_at`); nil when it was started at once.
    public var startAt: Timestamp?
    /// Its chunks a worker is sending now (under a live lease).
    public var chunksSending: Int
    /// Seconds it has had chunks to send, none being sent and no pacing pause
    /// (`next_lease_at`) to wait for: since it started, or since its last chunk ended or its
    /// last lease ran out. Nil when a chunk is being sent, none is left, or it is not running.
    public var waitingForWorkerSeconds: Double?

    public init(progress: CampaignProgress, rateLimit: Int?, runningSeconds: Double?, chunksSending: Int = 0,
                waitingForWorkerSeconds: Double? = nil, startAt: Timestamp? = nil) {
        self.progress = progress
        self.startAt = startAt
        self.rateLimit = rateLimit
        self.runningSeconds = runningSeconds
        self.chunksSending = chunksSending
        self.waitingForWorkerSeconds = waitingForWorkerSeconds
    }
}

/// Dead letters of one app and reason.
public struct DeadLetterCount: Sendable, Hashable {
    public var app: String
    public var reason: String
    public var count: Int

    public init(app: String, reason: String, count: Int) {
        self.app = app
        self.reason = reason
        self.count = count
    }
}

/// What `pushd status` shows, read from the database: the instances, the queue by app
/// and lane, the campaigns not over, the dead letters of the last hour, and each app's
/// broadcast channels and broadcast jobs.
public struct FleetSnapshot: Sendable {
    public var instances: [InstanceRecord]
    public var lanes: [LaneDepth]
    public var campaigns: [ActiveCampaign]
    public var deadLettersLastHour: [DeadLetterCount]
    public var broadcast: [BroadcastAppStatus]
    /// Whether the database takes writes; while it does not, no instance can write its heartbeat.
    public var writability: DatabaseWritability

    public init(instances: [InstanceRecord], lanes: [LaneDepth], campaigns: [ActiveCampaign], deadLettersLastHour: [DeadLetterCount],
                broadcast: [BroadcastAppStatus] = [], writability: DatabaseWritability = .writable) {
        self.writability = writability
        self.instances = instances
        self.lanes = lanes
        self.campaigns = campaigns
        self.deadLettersLastHour = deadLettersLastHour
        self.broadcast = broadcast
    }

    /// `ch`: per campaign, the chunks being sent, those a worker could lease, and when the last
    /// chunk ended or the last lease ran out (what a campaign waiting for a worker waits since).
    static let campaignsSQL = """
        SELECT \(CampaignProgress.columns), c.rate_limit, coalesce(ch.sending, 0),
               CASE WHEN c.status = 'running' AND h.campaign_id IS NULL AND ch.sending = 0 AND ch.free > 0
                         AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                    THEN extract(epoch FROM now() - greatest(c.started_at, ch.last_end, c.next_lease_at))::float8 END,
               c.start_at
        FROM \(CampaignProgress.source)
        LEFT JOIN LATERAL (
            SELECT count(*) FILTER (WHERE x.finished_at IS NULL AND x.lease_until >= now())::integer AS sending,
                   count(*) FILTER (WHERE x.finished_at IS NULL AND (x.lease_until IS NULL OR x.lease_until < now()))::integer AS free,
                   greatest(max(x.finished_at), max(x.lease_until) FILTER (WHERE x.lease_until < now())) AS last_end
            FROM pushd.campaign_chunks x WHERE x.campaign_id = c.id AND c.status = 'running'
        ) ch ON true
        WHERE \(CampaignProgress.notOver) ORDER BY c.id
        """

    /// Served by the index on (app, failed_at) one app at a time; the table is small next to
    /// the queue in a healthy system.
    static let deadLettersSQL = """
        SELECT app, reason, count(*) FROM pushd.dead_jobs
        WHERE failed_at > now() - interval '1 hour' GROUP BY app, reason ORDER BY app, count(*) DESC, reason
        """

    /// Reads everything in one repeatable-read transaction, so the numbers agree; whether the
    /// database takes writes is read before it, since inside a READ ONLY transaction it never does.
    public static func read(_ connection: PGConnection) throws -> FleetSnapshot {
        let writability = try DatabaseWritability.read(connection)
        try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            let instances = try InstanceStore().instances(connection)
            let lanes = try QueueStats.read(connection).lanes
            let campaigns = try connection.query(campaignsSQL).rows.map { row in
                let (progress, runningSeconds, _) = try CampaignProgress.decode(row)
                let next = CampaignProgress.columnCount
                return ActiveCampaign(progress: progress, rateLimit: try row.get(next), runningSeconds: runningSeconds,
                                      chunksSending: try row.require(next + 1), waitingForWorkerSeconds: try row.get(next + 2),
                                      startAt: try row.get(next + 3))
            }
            let dead = try connection.query(deadLettersSQL).rows.map { row in
                DeadLetterCount(app: try row.require(0), reason: try row.require(1), count: try row.require(2))
            }
            let broadcast = try BroadcastAppStatus.read(connection)
            try connection.query("COMMIT")
            return FleetSnapshot(instances: instances, lanes: lanes, campaigns: campaigns, deadLettersLastHour: dead,
                                 broadcast: broadcast, writability: writability)
        } catch {
            _ = try? connection.query("ROLLBACK")
            throw error
        }
    }
}

extension LaneDepth {
    /// For callers outside the module (the synthesized initializer is internal).
    public init(lane: Lane, app: String, due: Int, scheduled: Int, oldestAge: Double, refused: Int = 0) {
        self.lane = lane
        self.app = app
        self.depth = due
        self.scheduled = scheduled
        self.oldestAge = oldestAge
        self.refused = refused
    }
}
