/// One versioned step of the schema.
public struct Migration: Sendable, Hashable {
    public var version: Int
    public var name: String
    public var sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

/// Applies the pending migrations of schema `pushd` and records them in
/// `pushd.schema_migrations`.
///
/// Everything runs in one transaction holding a transaction-scoped advisory lock,
/// so two instances started together apply each migration once, and a failure
/// leaves the schema as it was. Running it again applies nothing.
public struct Migrator: Sendable {
    /// The advisory lock key: the bytes of "pushdmig" as a big-endian integer.
    public static let lockKey: Int64 = 0x7075_7368_646D_6967

    public var migrations: [Migration]

    public init(migrations: [Migration] = Migrator.migrations) {
        self.migrations = migrations
    }

    /// Applies what is missing and returns the versions applied by this call.
    @discardableResult
    public func migrate(_ connection: PGConnection) throws -> [Int] {
        try validateOrder()
        return try connection.transaction {
            // Schema changes may take longer than the session's statement_timeout.
            try connection.execute(script: "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; SET LOCAL client_min_messages = warning")
            try connection.query("SELECT pg_advisory_xact_lock($1)", [Self.lockKey])
            try connection.execute(script: """
                CREATE SCHEMA IF NOT EXISTS pushd;
                CREATE TABLE IF NOT EXISTS pushd.schema_migrations (
                    version    integer PRIMARY KEY,
                    name       text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
            let applied = Set(try appliedVersionsInTransaction(connection))
            var done = [Int]()
            for migration in migrations where !applied.contains(migration.version) {
                do {
                    try connection.execute(script: migration.sql)
                } catch let error as PGError {
                    var wrapped = error
                    wrapped.message = "migration \(migration.version) (\(migration.name)) failed: \(error.message)"
                    throw wrapped
                }
                try connection.query("INSERT INTO pushd.schema_migrations (version, name) VALUES ($1, $2)",
                                     [migration.version, migration.name])
                done.append(migration.version)
            }
            return done
        }
    }

    /// The versions recorded in the database, ascending; empty before the first migration.
    public func appliedVersions(_ connection: PGConnection) throws -> [Int] {
        let exists = try connection.query("SELECT to_regclass('pushd.schema_migrations') IS NOT NULL")
            .require(Bool.self, row: 0, column: 0)
        guard exists else { return [] }
        return try appliedVersionsInTransaction(connection)
    }

    private func appliedVersionsInTransaction(_ connection: PGConnection) throws -> [Int] {
        let result = try connection.query("SELECT version FROM pushd.schema_migrations ORDER BY version")
        return try result.rows.map { try $0.require(0, as: Int.self) }
    }

    private func validateOrder() throws {
        var previous = 0
        for migration in migrations {
            guard migration.version > previous else {
                throw PGError(code: .clientEncoding,
                              message: "migration versions must increase: \(migration.version) (\(migration.name)) follows \(previous)")
            }
            previous = migration.version
        }
    }
}
