import Glibc
import Locking
import Metrics
import QueueStore

/// Whether each lane's workers get through their passes (claim, send, record) or every pass
/// fails on the database: a lock another session holds on `pushd.jobs` or `pushd.campaigns`
/// (each statement waits `lock_timeout`, 10 s, and fails), or any other error that repeats.
/// Such a lane sends nothing while the process looks healthy (the readiness check's `SELECT 1`
/// is answered). A lane none of whose passes went through for `stuckAfter` seconds while they
/// fail is stuck: one error line (again once a minute while it lasts), `pushd_lane_stuck` 1,
/// and `/readyz` not ready naming the lane and the error; the first pass that goes through
/// ends it with one notice line.
///
/// Thread rule: every worker reports into `state` under its lock; the main loop reads `stuck`.
final class LaneHealth: @unchecked Sendable {
    /// How long a lane's passes may keep failing before it counts as stuck: just under the
    /// session's `lock_timeout` (10 s), so that one pass that waited a lock out is enough.
    static let stuckAfter = 9.5
    /// How often the error line of a lane that stays stuck is written again.
    static let repeatEvery = 60.0
    /// The lanes watched: the two of notifications to devices, and broadcasts.
    static let lanes = Lane.allCases.map(\.rawValue) + [BroadcastWorker.lane]

    struct Failing {
        /// When the first failed pass since the last one that went through began (monotonic seconds).
        var since: Double
        var error: String
        var sqlstate: String?
        var stuck = false
        var loggedAt = -Double.infinity
    }

    private let state = Lock<[String: Failing]>([:])
    /// Who holds the table locks that stop a lane (`TableLocks.holders`), for its first
    /// `lane_stuck` line after a lock wait; set by the pipeline, which has a session for it.
    private let lockHolders = Lock<(@Sendable () -> String?)?>(nil)
    private let metrics: PushdMetrics
    private let logger: Logger

    init(metrics: PushdMetrics, logger: Logger) {
        self.metrics = metrics
        self.logger = logger
        for lane in Self.lanes { metrics.laneStuck(lane: lane).set(0) }
    }

    func describeLockHolders(with describe: @escaping @Sendable () -> String?) {
        lockHolders.withLock { $0 = describe }
    }

    /// A pass of a worker of `lane` begun at `started` went through: the lane is not stuck,
    /// unless the pass began before the failing ones (a worker that waited for notifications
    /// since before a lock was taken touched no table).
    func passed(_ lane: String, started: Double, now: Double = RateLimiter.monotonicSeconds()) {
        guard let ended = state.withLock({ state -> Failing? in
            guard let failing = state[lane], started >= failing.since else { return nil }
            return state.removeValue(forKey: lane)
        }) else { return }
        guard ended.stuck else { return }
        metrics.laneStuck(lane: lane).set(0)
        logger.notice("\(lane) lane: a pass went through again after \((now - ended.since).fixed(1)) s of failing passes; its waiting work is sent",
                      ("event", "lane_recovered"), ("lane", .string(lane)), ("failed_s", .double(now - ended.since)))
    }

    /// A pass of a worker of `lane` begun at `started` failed with `error`.
    func failed(_ lane: String, error: any Error, started: Double, now: Double = RateLimiter.monotonicSeconds()) {
        let sqlstate = (error as? PGError).map { $0.code.raw }
        let line = state.withLock { state -> (Failing, first: Bool)? in
            var failing = state[lane] ?? Failing(since: started, error: "", sqlstate: nil)
            failing.error = "\(error)"
            failing.sqlstate = sqlstate
            defer { state[lane] = failing }
            guard now - failing.since >= Self.stuckAfter, now - failing.loggedAt >= Self.repeatEvery else { return nil }
            let first = !failing.stuck
            failing.stuck = true
            failing.loggedAt = now
            return (failing, first)
        }
        guard let (failing, first) = line else { return }
        if first { metrics.laneStuck(lane: lane).set(1) }
        let seconds = now - failing.since
        let holders = failing.sqlstate == PGError.Code.lockNotAvailable.raw ? lockHolders.withLock({ $0 })?() : nil
        logger.error("\(lane) lane \(first ? "stuck" : "still stuck"): no pass of its workers has gone through for \(seconds.fixed(1)) s, "
                     + "\(Self.describe(sqlstate: failing.sqlstate)); \(holders.map { "the lock is held by \($0); " } ?? "")its work waits in the queue and /readyz is not ready until a pass goes through: \(failing.error)",
                     ("event", "lane_stuck"), ("lane", .string(lane)), ("failing_s", .double(seconds)),
                     ("sqlstate", .string(failing.sqlstate ?? "")))
    }

    /// What `/readyz` says of the stuck lanes, nil when none is stuck. The SQLSTATE and what it
    /// means, never the message, which can quote the connection string.
    func stuckDetail(now: Double = RateLimiter.monotonicSeconds()) -> String? {
        let stuck = state.withLock { state in
            state.filter { $0.value.stuck }.sorted { $0.key < $1.key }
        }
        guard !stuck.isEmpty else { return nil }
        return stuck.map { lane, failing in
            "\(lane) lane stuck for \(Int(now - failing.since)) s: \(Self.describe(sqlstate: failing.sqlstate))"
        }.joined(separator: "; ") + " (see the log)"
    }

    /// The cause of a failed pass in an operator's words.
    static func describe(sqlstate: String?) -> String {
        switch sqlstate {
        case "55P03"?:
            return "each pass waits lock_timeout for a lock another session holds on a table or rows the lane needs (SQLSTATE 55P03, lock_not_available; pg_locks and pg_stat_activity name the holder)"
        case "57014"?:
            return "each pass runs into statement_timeout (SQLSTATE 57014)"
        case PGError.Code.readOnlySQLTransaction.raw?:
            return "the database is read-only and refuses every write (SQLSTATE 25006, read_only_sql_transaction: "
                + "default_transaction_read_only is on, or the server is a standby in recovery); nothing is recorded or sent until it takes writes again"
        case let code?:
            return "each pass fails on the database (SQLSTATE \(code))"
        case nil:
            return "each pass fails on the database"
        }
    }
}
