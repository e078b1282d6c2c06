/// Whether the database takes writes. A standby in recovery, or a server, database or role
/// with `default_transaction_read_only` on, refuses every write (SQLSTATE 25006): pushd can
/// then record nothing — no heartbeat, no claim, no outcome — and so sends nothing.
public enum DatabaseWritability: Sendable, Hashable {
    case writable
    /// `transaction_read_only` is on for a new transaction: `default_transaction_read_only`
    /// set for the server (`ALTER SYSTEM`), the database or the role.
    case readOnly
    /// A standby in recovery (`pg_is_in_recovery()`): read-only until it is promoted.
    case inRecovery

    /// What it is in an operator's words, nil when the database takes writes.
    public var cause: String? {
        switch self {
        case .writable:
            return nil
        case .readOnly:
            return "the database is read-only (transaction_read_only is on: default_transaction_read_only set for the server, the database or the role)"
        case .inRecovery:
            return "the database is a standby in recovery (pg_is_in_recovery()), read-only until it is promoted"
        }
    }

    /// `transaction_read_only` outside a transaction block is what a new transaction gets: the
    /// default, or on in recovery whatever the default says.
    static let sql = "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'"

    /// Reads it on `connection`, which must not be inside a transaction (a READ ONLY one would
    /// answer read-only).
    public static func read(_ connection: PGConnection) throws -> DatabaseWritability {
        let result = try connection.query(sql)
        if try result.require(Bool.self, row: 0, column: 0) { return .inRecovery }
        return try result.require(Bool.self, row: 0, column: 1) ? .readOnly : .writable
    }
}
