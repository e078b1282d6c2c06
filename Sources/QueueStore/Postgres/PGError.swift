/// An error from PostgreSQL or from talking to it.
///
/// `code` is the server's SQLSTATE when there is one. It is an opaque struct
/// rather than an enum so that codes added by newer servers never break callers.
public struct PGError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The five-character SQLSTATE, or a pushd-local code for client-side failures.
        public let raw: String
        public init(_ raw: String) { self.raw = raw }
        public var description: String { raw }

        public static let uniqueViolation = Code("23505")
        public static let checkViolation = Code("23514")
        public static let notNullViolation = Code("23502")
        public static let foreignKeyViolation = Code("23503")
        public static let invalidTextRepresentation = Code("22P02")
        public static let syntaxError = Code("42601")
        public static let undefinedTable = Code("42P01")
        public static let undefinedFunction = Code("42883")
        public static let serializationFailure = Code("40001")
        public static let deadlockDetected = Code("40P01")
        public static let lockNotAvailable = Code("55P03")
        public static let queryCanceled = Code("57014")
        public static let noActiveTransaction = Code("25P01")
        /// A write refused by a read-only database: a standby in recovery, or `default_transaction_read_only` on.
        public static let readOnlySQLTransaction = Code("25006")
        public static let adminShutdown = Code("57P01")
        public static let raiseException = Code("P0001")
        /// Client side: the connection could not be made or was lost.
        public static let connectionFailure = Code("08006")
        /// Client side: a value could not be sent or read as asked.
        public static let clientEncoding = Code("pushd-encoding")
        /// Client side: the connection was used after `close()`.
        public static let connectionClosed = Code("pushd-closed")

        /// SQLSTATE class 08 and the admin-shutdown family mean the connection is gone.
        public var isConnectionLoss: Bool { raw.hasPrefix("08") || raw.hasPrefix("57P") }

        /// The statement failed because of the server's state at that moment, not because of
        /// what it asked: the connection (08, the 57P family, one closed here), a transaction
        /// the server would not write in or had aborted (25: 25006 on a read-only server, as
        /// during a failover), a serialization failure or deadlock (40), a lack of resources
        /// (53), a lock or an object in use (55), a cancel or statement timeout (57014), a
        /// system error (58). The same statement may go through later; what the caller holds
        /// in memory is still right.
        public var isTransient: Bool {
            isConnectionLoss || self == .connectionClosed || ["25", "40", "53", "55", "57", "58"].contains(raw.prefix(2))
        }
    }

    public var code: Code
    public var message: String
    public var detail: String?
    public var hint: String?
    public var constraint: String?
    public var table: String?
    public var column: String?
    /// The beginning of the statement that failed, for the operator's log.
    public var statement: String?

    public init(code: Code, message: String, detail: String? = nil, hint: String? = nil,
                constraint: String? = nil, table: String? = nil, column: String? = nil,
                statement: String? = nil) {
        self.code = code
        self.message = message
        self.detail = detail
        self.hint = hint
        self.constraint = constraint
        self.table = table
        self.column = column
        self.statement = statement
    }

    public var description: String {
        var text = "PostgreSQL error \(code.raw): \(message)"
        if let detail { text += " (detail: \(detail))" }
        if let hint { text += " (hint: \(hint))" }
        if let constraint { text += " [constraint \(constraint)]" }
        if let statement { text += " in statement: \(statement)" }
        return text
    }
}
