/// One app's broadcast channels and broadcast jobs, as `pushd status` shows them.
public struct BroadcastAppStatus: Sendable, Hashable {
    public var app: String
    /// Channels by state; deleted ones are history and not counted.
    public var activeChannels: Int
    public var pendingCreates: Int
    public var pendingDeletes: Int
    public var failedChannels: Int
    /// Pending channel operations already tried and waiting for another try.
    public var retryingChannelOperations: Int
    /// Seconds the oldest due channel operation has waited for a worker to take it (0 when none
    /// is due: a taken or retrying operation's `run_at` lies ahead).
    public var oldestDueChannelOperationSeconds: Double
    /// The outcome last recorded on a pending or failed channel, the newest first.
    public var lastChannelError: String?
    public var jobsDue: Int
    public var jobsScheduled: Int
    /// Queued broadcast jobs that have failed at least once.
    public var jobsRetrying: Int
    public var oldestDueJobSeconds: Double
    /// The error of the newest retried job still queued.
    public var lastJobError: String?
    /// Broadcast jobs given up on (in `pushd.dead_jobs` with a `channel_id`) in the last hour.
    public var deadLastHour: Int

    public init(app: String, activeChannels: Int = 0, pendingCreates: Int = 0, pendingDeletes: Int = 0, failedChannels: Int = 0,
                retryingChannelOperations: Int = 0, oldestDueChannelOperationSeconds: Double = 0, lastChannelError: String? = nil,
                jobsDue: Int = 0, jobsScheduled: Int = 0, jobsRetrying: Int = 0, oldestDueJobSeconds: Double = 0,
                lastJobError: String? = nil, deadLastHour: Int = 0) {
        self.app = app
        self.activeChannels = activeChannels
        self.pendingCreates = pendingCreates
        self.pendingDeletes = pendingDeletes
        self.failedChannels = failedChannels
        self.retryingChannelOperations = retryingChannelOperations
        self.oldestDueChannelOperationSeconds = oldestDueChannelOperationSeconds
        self.lastChannelError = lastChannelError
        self.jobsDue = jobsDue
        self.jobsScheduled = jobsScheduled
        self.jobsRetrying = jobsRetrying
        self.oldestDueJobSeconds = oldestDueJobSeconds
        self.lastJobError = lastJobError
        self.deadLastHour = deadLastHour
    }

    /// Pending channel operations (creates and deletes).
    public var pendingChannelOperations: Int { pendingCreates + pendingDeletes }

    /// Every app with a channel that is not deleted, a queued broadcast job, or a broadcast
    /// dead letter of the last hour, by app.
    static let sql = """
        WITH c AS (
            SELECT app,
                   count(*) FILTER (WHERE state = 'active') AS active,
                   count(*) FILTER (WHERE state = 'pending_create') AS creating,
                   count(*) FILTER (WHERE state = 'pending_delete') AS deleting,
                   count(*) FILTER (WHERE state = 'failed') AS failed,
                   count(*) FILTER (WHERE state IN ('pending_create', 'pending_delete') AND attempts > 0) AS retrying,
                   coalesce(extract(epoch FROM now() - min(run_at) FILTER (
                       WHERE state IN ('pending_create', 'pending_delete') AND run_at <= now())), 0)::float8 AS oldest,
                   (array_agg(outcome ORDER BY id DESC) FILTER (
                       WHERE (state = 'failed' OR (state IN ('pending_create', 'pending_delete') AND attempts > 0))
                         AND outcome IS NOT NULL))[1] AS error
            FROM pushd.channels WHERE state <> 'deleted' GROUP BY app
        ), b AS (
            SELECT app,
                   count(*) FILTER (WHERE run_at <= now()) AS due,
                   count(*) FILTER (WHERE run_at > now()) AS scheduled,
                   count(*) FILTER (WHERE last_error IS NOT NULL) AS retrying,
                   coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8 AS oldest,
                   (array_agg(last_error ORDER BY id DESC) FILTER (WHERE last_error IS NOT NULL))[1] AS error
            FROM pushd.broadcast_jobs GROUP BY app
        ), d AS (
            SELECT app, count(*) AS dead FROM pushd.dead_jobs
            WHERE channel_id IS NOT NULL AND failed_at > now() - interval '1 hour' GROUP BY app
        ), apps AS (
            SELECT app FROM c UNION SELECT app FROM b UNION SELECT app FROM d
        )
        SELECT apps.app, coalesce(c.active, 0), coalesce(c.creating, 0), coalesce(c.deleting, 0), coalesce(c.failed, 0),
               coalesce(c.retrying, 0), coalesce(c.oldest, 0), c.error,
               coalesce(b.due, 0), coalesce(b.scheduled, 0), coalesce(b.retrying, 0), coalesce(b.oldest, 0), b.error,
               coalesce(d.dead, 0)
        FROM apps LEFT JOIN c ON c.app = apps.app LEFT JOIN b ON b.app = apps.app LEFT JOIN d ON d.app = apps.app
        ORDER BY apps.app
        """

    public static func read(_ connection: PGConnection) throws -> [BroadcastAppStatus] {
        try connection.query(sql).rows.map { row in
            BroadcastAppStatus(app: try row.require(0), activeChannels: try row.require(1), pendingCreates: try row.require(2),
                               pendingDeletes: try row.require(3), failedChannels: try row.require(4),
                               retryingChannelOperations: try row.require(5), oldestDueChannelOperationSeconds: try row.require(6),
                               lastChannelError: try row.get(7), jobsDue: try row.require(8), jobsScheduled: try row.require(9),
                               jobsRetrying: try row.require(10), oldestDueJobSeconds: try row.require(11),
                               lastJobError: try row.get(12), deadLastHour: try row.require(13))
        }
    }
}
