/// What became of a transaction whose session ended while it was committing, as PostgreSQL
/// tells it to another session (`pg_xact_status`): a COMMIT whose reply was lost went through
/// or not, and only the server knows which.
///
/// A claim remembers its transaction's id (`pg_current_xact_id()`, read in the claim's own
/// statement: no round trip of its own) so that a worker whose session ended while it wrote a
/// batch's outcomes can ask, on a new session, whether they were committed.
public enum TransactionFate: String, Sendable, Hashable {
    /// The COMMIT went through: only its reply was lost.
    case committed
    /// Rolled back (the session ended before the COMMIT, or the COMMIT failed).
    case aborted
    /// Still running: the server has not yet seen that the session is gone (a network cut),
    /// and may yet commit it or roll it back.
    case inProgress = "in progress"
    /// The server no longer knows (the status of so old a transaction was truncated), or the
    /// transaction's id was not read.
    case unknown

    /// The id of the transaction `connection` is in, as `fate(of:on:)` takes it: the SQL to read
    /// in a statement of that transaction (it assigns an id if the transaction has none yet).
    public static let currentIDSQL = "pg_current_xact_id()::text::bigint"

    /// Begins a transaction block on `connection` and returns its id, in one round trip.
    public static func begin(on connection: PGConnection) throws -> Int64 {
        try connection.execute(script: "BEGIN; SELECT \(currentIDSQL)").require(row: 0, column: 0)
    }

    /// Ends transaction `id` if backend `backend` still runs it, and tells what came of it
    /// (`Ending.ended`: the backend is gone). Else: no such session (it ended, or this is
    /// another server, after a failover, where the pid and the id may belong to others), it did
    /// not exit within `waitMilliseconds`, or the server refused, as it does for another role's
    /// session without `pg_signal_backend`. A session cut in the network whose server has not noticed (no FIN
    /// reached it: a dropped path, a stuck middlebox) keeps its transaction running and its rows
    /// locked until TCP keepalive or `idle_in_transaction_session_timeout` ends it, and may yet
    /// commit a COMMIT in flight; once it is ended (`pg_terminate_backend`, which waits for the
    /// backend to exit), it is committed or aborted, and `fate(of:on:)` says which. Both the pid
    /// and the transaction must match (`backend_xid` is the id's low 32 bits); the call ends only
    /// the row the condition kept, being in the select list. Outside a transaction. The wait
    /// costs only while the backend lives: one told to end exits within milliseconds on a
    /// quiet server, but on a loaded one it can take seconds, and a wait that runs out leaves the
    /// batch's rows locked and the retake empty (they are sent again once the backend ends).
    public static func endRunning(_ id: Int64, backend: Int32, on connection: PGConnection, waitMilliseconds: Int = 5000) throws -> Ending {
        do {
            let result = try connection.query("""
                SELECT pg_terminate_backend(pid, $3::bigint) FROM pg_stat_activity
                WHERE pid = $1 AND backend_xid = ($2::bigint % 4294967296)::text::xid AND pid <> pg_backend_pid()
                """, [backend, id, Int64(waitMilliseconds)])
            guard result.rowCount > 0 else { return .notFound }
            return try result.get(Bool.self, row: 0, column: 0) == true ? .ended : .notExited(waitMilliseconds: waitMilliseconds)
        } catch let error as PGError where !error.code.isConnectionLoss && error.code != .connectionClosed && connection.isOpen {
            return .refused(error)
        }
    }

    /// What `endRunning` did.
    public enum Ending: Sendable {
        /// The backend ran the transaction and exited when told to.
        case ended
        /// No backend with that pid runs that transaction (it ended, or this is another server).
        case notFound
        /// Told to end, it had not exited within `waitMilliseconds`.
        case notExited(waitMilliseconds: Int)
        /// The server refused the request (another role's session without `pg_signal_backend`).
        case refused(PGError)

        /// Whether the backend was told to end.
        public var signalled: Bool {
            switch self {
            case .ended, .notExited: true
            case .notFound, .refused: false
            }
        }
    }

    /// Asks on `connection` (another session than the one that ran it) what became of
    /// transaction `id`. A server that refuses the question says nothing of it: unknown. That is
    /// the answer after a failover to a replica that had not caught up, which has not given out
    /// the old primary's id yet ("transaction ID … is in the future", 22023). Asked inside a
    /// transaction (a retake's), the question runs under a savepoint, so a refusal leaves that
    /// transaction going; only a lost session is thrown.
    public static func fate(of id: Int64, on connection: PGConnection) throws -> TransactionFate {
        let inTransaction = connection.isInTransaction
        if inTransaction { _ = try connection.execute(script: "SAVEPOINT pushd_transaction_fate") }
        do {
            let result = try connection.query("SELECT pg_xact_status($1::bigint::text::xid8)", [id])
            if inTransaction { _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_transaction_fate") }
            guard let status = try result.get(String.self, row: 0, column: 0) else { return .unknown }
            return TransactionFate(rawValue: status) ?? .unknown
        } catch let error as PGError where !error.code.isConnectionLoss && error.code != .connectionClosed && connection.isOpen {
            if inTransaction { _ = try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_transaction_fate") }
            return .unknown
        }
    }
}
