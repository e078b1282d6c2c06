import Posix

/// A row of `pushd.device_tokens`.
public struct RegisteredToken: Sendable, Hashable {
    public var app: String
    public var token: String
    public var environment: String
    public var userID: String?
    public var createdAt: Timestamp
    public var updatedAt: Timestamp
    public var invalidatedAt: Timestamp?
    public var invalidReason: String?

    public var isLive: Bool { invalidatedAt == nil }
}

/// A token APNs reported as unusable.
public struct TokenPrune: Sendable, Hashable {
    public var app: String
    public var token: String
    /// The APNs reason, for example `Unregistered` or `BadDeviceToken`.
    public var reason: String
    /// The 410 answer's timestamp: the token is kept if it was registered again after it.
    /// nil (400 BadDeviceToken, DeviceTokenNotForTopic) prunes unconditionally.
    public var apnsTimestamp: Timestamp?
    /// The environment whose host gave the answer: a token registered for the other
    /// environment is not pruned (that host never knew it). nil prunes whatever the environment.
    public var environment: String?

    public init(app: String, token: String, reason: String, apnsTimestamp: Timestamp?, environment: String? = nil) {
        self.app = app
        self.token = token
        self.reason = reason
        self.apnsTimestamp = apnsTimestamp
        self.environment = environment
    }
}

/// What a batch of prunes did to the registered tokens.
public struct PruneOutcome: Sendable, Hashable {
    /// Tokens marked invalid by this batch.
    public var invalidated: [TokenPrune] = []
    /// 410 answers whose token was registered again after APNs' timestamp: kept live.
    public var keptByTimestamp: [TokenPrune] = []

    /// Prunes a CHECK of `pushd.device_tokens` refused to write (one added NOT VALID after the
    /// token was registered): the token was left as it is.
    public var refused: [RefusedPrune] = []

    /// Prunes the database did not write for another reason (a lock held longer than
    /// `lock_timeout` on a token's row, a value it refused): the tokens were left as they are.
    /// `check` is nil in each; `message` is the error.
    public var failed: [RefusedPrune] = []

    /// Prunes the caller left out before writing (DeviceTokenNotForTopic or BadDeviceToken
    /// answers of a run that blamed their topic or environment): not written. The caller forgets them once the transaction is committed.
    public var withheld: [TokenPrune] = []

    public init(invalidated: [TokenPrune] = [], keptByTimestamp: [TokenPrune] = [], refused: [RefusedPrune] = [],
                failed: [RefusedPrune] = []) {
        self.invalidated = invalidated
        self.keptByTimestamp = keptByTimestamp
        self.refused = refused
        self.failed = failed
    }
}

/// A prune a CHECK of `pushd.device_tokens` refused to write.
public struct RefusedPrune: Sendable, Hashable {
    public var prune: TokenPrune
    /// The constraint's name, when the server gave one.
    public var check: String?
    /// What the check said.
    public var message: String

    public init(prune: TokenPrune, check: String?, message: String) {
        self.prune = prune
        self.check = check
        self.message = message
    }
}

/// Registered device tokens: the upsert applications call, and pruning.
public struct TokenStore: Sendable {
    public init() {}

    /// The same upsert applications run with `SELECT pushd.register_token(…)`.
    public func register(_ connection: PGConnection, app: String, token: String, userID: String? = nil,
                         environment: String = "production") throws {
        try connection.query("SELECT pushd.register_token($1, $2, $3, $4)", [app, token, userID, environment])
    }

    /// Marks a token invalid unless it was registered again after APNs' timestamp.
    /// Returns true when the token was pruned by this call.
    @discardableResult
    public func prune(_ connection: PGConnection, app: String, token: String, reason: String,
                      apnsTimestamp: Timestamp?) throws -> Bool {
        try prune(connection, [TokenPrune(app: app, token: token, reason: reason, apnsTimestamp: apnsTimestamp)]).invalidated.count == 1
    }

    // The final SELECT reads the rows as they were before the UPDATE (one snapshot), so
    // a token is "kept" when it was live and registered again after APNs' timestamp.
    // A token the app never registered (a campaign target imported from a file, a job
    // INSERTed with its own token) is recorded as pruned, with the environment of the host
    // that answered: there is no registration for APNs' timestamp to be older than, and
    // without the row the next campaign or job would send to it again.
    static let pruneSQL = """
        WITH p AS (
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[]) WITH ORDINALITY
                AS p(app, token, reason, apns_timestamp, environment, n)
        ), invalidated AS (
            UPDATE pushd.device_tokens d
            SET invalidated_at = now(), invalid_reason = p.reason
            FROM p
            WHERE d.app = p.app AND d.token = lower(p.token) AND d.invalidated_at IS NULL
              AND (p.apns_timestamp IS NULL OR d.updated_at <= p.apns_timestamp)
              AND (p.environment IS NULL OR d.environment = p.environment)
            RETURNING p.n
        ), recorded AS (
            INSERT INTO pushd.device_tokens (app, token, environment, invalidated_at, invalid_reason)
            SELECT DISTINCT ON (p.app, lower(p.token)) p.app, lower(p.token), coalesce(p.environment, 'production'), now(), p.reason
            FROM p
            WHERE NOT EXISTS (SELECT 1 FROM pushd.device_tokens d WHERE d.app = p.app AND d.token = lower(p.token))
            ORDER BY p.app, lower(p.token), p.n
            ON CONFLICT (app, token) DO NOTHING
            RETURNING app, token
        )
        SELECT n, true FROM invalidated
        UNION ALL
        SELECT min(p.n), true FROM recorded r JOIN p ON p.app = r.app AND lower(p.token) = r.token GROUP BY r.app, r.token
        UNION ALL
        SELECT p.n, false FROM p JOIN pushd.device_tokens d ON d.app = p.app AND d.token = lower(p.token)
        WHERE d.invalidated_at IS NULL AND p.apns_timestamp IS NOT NULL AND d.updated_at > p.apns_timestamp
          AND (p.environment IS NULL OR d.environment = p.environment)
        """

    /// Prunes a batch in one statement and says, per token, what happened: invalidated
    /// (a token never registered is recorded as pruned), kept because the app registered it
    /// again after APNs' timestamp, or neither (already pruned, or registered for the other
    /// environment).
    ///
    /// A batch's prunes run inside its claim's transaction, so a token row a CHECK refuses to
    /// write (one added NOT VALID after the token was registered) would fail the transaction and
    /// send the batch again, every time. When a check refuses the statement, the prunes are
    /// written one by one (under a savepoint inside a transaction) and the refused ones are
    /// left out (`PruneOutcome.refused`): those tokens stay as they are. Any other error of the
    /// statement but a lost connection (an application's transaction holding a token's row past
    /// `lock_timeout`, say) leaves every token of the call as it is (`PruneOutcome.failed`) and
    /// a transaction open around it usable, so that the batch's answers (a campaign chunk's
    /// progress, outside one) are recorded and not sent again.
    @discardableResult
    public func prune(_ connection: PGConnection, _ prunes: [TokenPrune]) throws -> PruneOutcome {
        guard !prunes.isEmpty else { return PruneOutcome() }
        let guarded = connection.isInTransaction
        if guarded { _ = try connection.execute(script: "SAVEPOINT pushd_prune") }
        do {
            let outcome = try pruneInOneStatement(connection, prunes)
            if guarded { _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_prune") }
            return outcome
        } catch let error as PGError where error.code == .checkViolation {
            if guarded { _ = try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_prune") }
        } catch let error as PGError where !error.code.isConnectionLoss && error.code != .connectionClosed {
            // Outside a transaction the statement wrote nothing either.
            if guarded { _ = try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_prune; RELEASE SAVEPOINT pushd_prune") }
            return PruneOutcome(failed: prunes.map { RefusedPrune(prune: $0, check: nil, message: "\(error)") })
        }
        var outcome = PruneOutcome()
        for prune in prunes {
            do {
                let one = try pruneInOneStatement(connection, [prune])
                outcome.invalidated += one.invalidated
                outcome.keptByTimestamp += one.keptByTimestamp
                if guarded { _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_prune; SAVEPOINT pushd_prune") }
            } catch let error as PGError where error.code == .checkViolation {
                if guarded { _ = try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_prune") }
                outcome.refused.append(RefusedPrune(prune: prune, check: error.constraint, message: error.message))
            }
        }
        if guarded { _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_prune") }
        return outcome
    }

    private func pruneInOneStatement(_ connection: PGConnection, _ prunes: [TokenPrune]) throws -> PruneOutcome {
        let result = try connection.query(connection.prepared(Self.pruneSQL),
                                          [prunes.map(\.app), prunes.map(\.token), prunes.map(\.reason),
                                           prunes.map(\.apnsTimestamp), prunes.map(\.environment)])
        var rows = [(index: Int, invalidated: Bool)]()
        for row in result.rows { rows.append((try row.require(0, as: Int.self) - 1, try row.require(1, as: Bool.self))) }
        var outcome = PruneOutcome()
        for row in rows.sorted(by: { $0.index < $1.index }) {
            if row.invalidated { outcome.invalidated.append(prunes[row.index]) } else { outcome.keptByTimestamp.append(prunes[row.index]) }
        }
        return outcome
    }

    // Takes back prunes for `reason` (DeviceTokenNotForTopic answers that blamed the topic, or
    // BadDeviceToken answers that came from the other environment's tokens, not dead tokens): a row the prune recorded for a token the app never registered is deleted
    // (it was inserted with created_at = invalidated_at, one statement's now(); a registered
    // row is always created by an earlier statement than the one pruning it), any other row
    // is live again. A row registered again, or pruned since for another reason, is left as
    // it is. updated_at is not touched: it is the registration time the 410 rule compares.
    static let restoreSQL = """
        WITH r AS (
            SELECT DISTINCT lower(t) AS token FROM unnest($2::text[]) AS t
        ), removed AS (
            DELETE FROM pushd.device_tokens d USING r
            WHERE d.app = $1 AND d.token = r.token AND d.invalidated_at IS NOT NULL AND d.invalid_reason = $3
              AND d.created_at = d.invalidated_at
            RETURNING d.token
        ), revived AS (
            UPDATE pushd.device_tokens d SET invalidated_at = NULL, invalid_reason = NULL
            FROM r
            WHERE d.app = $1 AND d.token = r.token AND d.invalidated_at IS NOT NULL AND d.invalid_reason = $3
              AND d.created_at <> d.invalidated_at
            RETURNING d.token
        )
        SELECT (SELECT count(*) FROM removed) + (SELECT count(*) FROM revived)
        """

    /// Undoes the prunes of `tokens` of `app` made for `reason`, as if they had never been
    /// made; returns how many it undid.
    @discardableResult
    public func restore(_ connection: PGConnection, app: String, tokens: [String], reason: String) throws -> Int {
        guard !tokens.isEmpty else { return 0 }
        return try connection.query(Self.restoreSQL, [app, tokens, reason]).require(Int.self, row: 0, column: 0)
    }

    public func token(_ connection: PGConnection, app: String, token: String) throws -> RegisteredToken? {
        let result = try connection.query("""
            SELECT app, token, environment, user_id, created_at, updated_at, invalidated_at, invalid_reason
            FROM pushd.device_tokens WHERE app = $1 AND token = lower($2)
            """, [app, token])
        guard result.rowCount == 1 else { return nil }
        let row = result[0]
        return RegisteredToken(app: try row.require(0), token: try row.require(1), environment: try row.require(2),
                           userID: try row.get(3), createdAt: try row.require(4), updatedAt: try row.require(5),
                           invalidatedAt: try row.get(6), invalidReason: try row.get(7))
    }

    /// The live tokens of a user, as `pushd.notify_user` would address them.
    public func liveTokens(_ connection: PGConnection, app: String, userID: String) throws -> [String] {
        try connection.query("""
            SELECT token FROM pushd.device_tokens
            WHERE app = $1 AND user_id = $2 AND invalidated_at IS NULL ORDER BY token
            """, [app, userID]).rows.map { try $0.require(0) }
    }

    /// Live and pruned tokens per app (of one app or all), by app name.
    public func counts(_ connection: PGConnection, app: String? = nil) throws -> [TokenCounts] {
        try connection.query("""
            SELECT app,
                   count(*) FILTER (WHERE invalidated_at IS NULL),
                   count(*) FILTER (WHERE invalidated_at IS NULL AND environment = 'production'),
                   count(*) FILTER (WHERE invalidated_at IS NULL AND environment = 'sandbox'),
                   count(*) FILTER (WHERE invalidated_at IS NOT NULL),
                   count(*) FILTER (WHERE invalidated_at > now() - interval '1 day'),
                   max(invalidated_at)
            FROM pushd.device_tokens
            WHERE $1::text IS NULL OR app = $1
            GROUP BY app ORDER BY app
            """, [app]).rows.map { row in
            TokenCounts(app: try row.require(0), live: try row.require(1), liveProduction: try row.require(2),
                        liveSandbox: try row.require(3), pruned: try row.require(4), prunedLastDay: try row.require(5),
                        lastPruned: try row.get(6))
        }
    }

    /// Pruned tokens per app and APNs reason, the most frequent reason first.
    public func pruneReasons(_ connection: PGConnection, app: String? = nil) throws -> [PruneReasonCount] {
        try connection.query("""
            SELECT app, coalesce(invalid_reason, 'unknown'), count(*)
            FROM pushd.device_tokens
            WHERE invalidated_at IS NOT NULL AND ($1::text IS NULL OR app = $1)
            GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2
            """, [app]).rows.map { row in
            PruneReasonCount(app: try row.require(0), reason: try row.require(1), tokens: try row.require(2))
        }
    }
}

/// One app's registered tokens: live (by environment) and pruned.
public struct TokenCounts: Sendable, Equatable {
    public var app: String
    public var live: Int
    public var liveProduction: Int
    public var liveSandbox: Int
    public var pruned: Int
    public var prunedLastDay: Int
    public var lastPruned: Timestamp?
}

/// How many of an app's tokens were pruned for one reason.
public struct PruneReasonCount: Sendable, Equatable {
    public var app: String
    public var reason: String
    public var tokens: Int

    public init(app: String, reason: String, tokens: Int) {
        self.app = app
        self.reason = reason
        self.tokens = tokens
    }
}
