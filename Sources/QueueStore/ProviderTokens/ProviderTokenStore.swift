import Posix

/// A provider JWT shared by every pushd instance using the same signing key.
public struct SharedProviderToken: Sendable, Hashable {
    public var token: String
    public var issuedAt: Timestamp
    /// True when this call minted it (and stored it for the others).
    public var minted: Bool
    /// The instance that stored it (`minted_by`), when read from the table.
    public var mintedBy: String?

    public init(token: String, issuedAt: Timestamp, minted: Bool, mintedBy: String? = nil) {
        self.token = token
        self.issuedAt = issuedAt
        self.minted = minted
        self.mintedBy = mintedBy
    }
}

/// `pushd.provider_tokens`: one JWT per (key id, team id) cluster-wide.
///
/// APNs refuses tokens that change more often than every 20 minutes on a connection
/// and expires them after 60, so instances must agree on one. A fresh token is
/// read without locking; a stale one is replaced under the row's lock, so of several
/// instances noticing at once, one mints and the others read its token.
public struct ProviderTokenStore: Sendable {
    public init() {}

    /// Returns the stored token if it is younger than `maxAge` seconds (measured on the
    /// database's clock), otherwise calls `mint` once under the row lock and stores its result.
    /// A stored token equal to `rejected` (APNs called it expired) is replaced whatever its age.
    public func providerToken(_ connection: PGConnection, keyID: String, teamID: String, maxAge: Double,
                              instance: String = "pushd", rejected: String? = nil,
                              mint: () throws -> (token: String, issuedAt: Timestamp)) throws -> SharedProviderToken {
        guard maxAge > 0 else { throw QueueError("provider token maxAge must be positive, got \(maxAge)") }
        let read = """
            SELECT token, issued_at, extract(epoch FROM now() - issued_at)::float8, minted_by
            FROM pushd.provider_tokens WHERE key_id = $1 AND team_id = $2
            """
        if let fresh = try Self.fresh(connection.query(read, [keyID, teamID]), maxAge: maxAge, rejected: rejected) { return fresh }
        return try connection.transaction {
            try connection.query("""
                INSERT INTO pushd.provider_tokens (key_id, team_id) VALUES ($1, $2) ON CONFLICT DO NOTHING
                """, [keyID, teamID])
            let locked = try connection.query(read + " FOR UPDATE", [keyID, teamID])
            if let fresh = try Self.fresh(locked, maxAge: maxAge, rejected: rejected) { return fresh }
            let minted = try mint()
            try connection.query("""
                UPDATE pushd.provider_tokens SET token = $3, issued_at = $4, minted_by = $5
                WHERE key_id = $1 AND team_id = $2
                """, [keyID, teamID, minted.token, minted.issuedAt, instance])
            return SharedProviderToken(token: minted.token, issuedAt: minted.issuedAt, minted: true)
        }
    }

    /// APNs answered InvalidProviderToken to `token`: removes the row if it still holds exactly
    /// that token, so that no instance is handed it again and the next one to ask mints anew.
    /// A row another instance has meanwhile replaced is left alone. Returns whether a row went.
    @discardableResult
    public func forget(_ connection: PGConnection, keyID: String, teamID: String, token: String) throws -> Bool {
        try connection.query("""
            DELETE FROM pushd.provider_tokens WHERE key_id = $1 AND team_id = $2 AND token = $3
            """, [keyID, teamID, token]).affectedRows > 0
    }

    private static func fresh(_ result: PGResult, maxAge: Double, rejected: String?) throws -> SharedProviderToken? {
        guard result.rowCount == 1, let token = try result.get(String.self, row: 0, column: 0), token != rejected,
              let issuedAt = try result.get(Timestamp.self, row: 0, column: 1),
              let age = try result.get(Double.self, row: 0, column: 2), age < maxAge, age > -60 else { return nil }
        return SharedProviderToken(token: token, issuedAt: issuedAt, minted: false,
                                   mintedBy: try result.get(String.self, row: 0, column: 3))
    }
}
