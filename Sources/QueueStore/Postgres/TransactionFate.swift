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
