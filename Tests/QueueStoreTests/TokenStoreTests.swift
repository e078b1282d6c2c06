import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Testing

@Suite struct TokenStoreTests {
    let tokens = TokenStore()

    func updatedAt(_ connection: PGConnection, _ token: String) throws -> Timestamp {
        try #require(try tokens.token(connection, app: "shop", token: token)).updatedAt
    }

    @Test func registrationUpsertsAndRevivesAPrunedToken() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let token = Fixtures.token(7)
            try connection.query("SELECT pushd.register_token('shop', $1, 'u1')", [token.uppercased()])
            var row = try #require(try tokens.token(connection, app: "shop", token: token))
            #expect(row.token == token)
            #expect(row.userID == "u1")
            #expect(row.environment == "production")
            #expect(try tokens.prune(connection, app: "shop", token: token, reason: "BadDeviceToken", apnsTimestamp: nil))
            row = try #require(try tokens.token(connection, app: "shop", token: token))
            #expect(!row.isLive)
            #expect(row.invalidReason == "BadDeviceToken")
            try tokens.register(connection, app: "shop", token: token, userID: "u2", environment: "sandbox")
            row = try #require(try tokens.token(connection, app: "shop", token: token))
            #expect(row.isLive)
            #expect(row.invalidReason == nil)
            #expect(row.userID == "u2")
            #expect(row.environment == "sandbox")
            #expect(try connection.query("SELECT count(*) FROM pushd.device_tokens").require(Int.self, row: 0, column: 0) == 1)
        }
    }

    /// Restoring DeviceTokenNotForTopic prunes undoes exactly them: a registered token is live
    /// again with its registration time, a row the prune recorded for a token nobody
    /// registered is gone, and a token registered again or pruned for another reason is left.
    @Test func restoreUndoesOnlyThePrunesOfItsReason() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let registered = Fixtures.token(20), unknown = Fixtures.token(21), again = Fixtures.token(22)
            let other = Fixtures.token(23), bad = Fixtures.token(24)
            for token in [registered, again, other, bad] { try tokens.register(connection, app: "shop", token: token, environment: "sandbox") }
            let registeredAt = try updatedAt(connection, registered)
            try tokens.prune(connection, [registered, unknown, again, bad].map {
                TokenPrune(app: "shop", token: $0, reason: "DeviceTokenNotForTopic", apnsTimestamp: nil, environment: "sandbox")
            } + [TokenPrune(app: "shop", token: other, reason: "BadDeviceToken", apnsTimestamp: nil, environment: "sandbox")])
            try tokens.register(connection, app: "shop", token: again, userID: "u9", environment: "sandbox")
            let restored = try tokens.restore(connection, app: "shop", tokens: [registered.uppercased(), unknown, again, other],
                                              reason: "DeviceTokenNotForTopic")
            #expect(restored == 2)
            let row = try #require(try tokens.token(connection, app: "shop", token: registered))
            #expect(row.isLive && row.invalidReason == nil && row.updatedAt == registeredAt && row.environment == "sandbox")
            #expect(try tokens.token(connection, app: "shop", token: unknown) == nil)
            #expect(try tokens.token(connection, app: "shop", token: again)?.userID == "u9")
            #expect(try tokens.token(connection, app: "shop", token: other)?.invalidReason == "BadDeviceToken")
            // Not named: still pruned.
            #expect(try tokens.token(connection, app: "shop", token: bad)?.invalidReason == "DeviceTokenNotForTopic")
            #expect(try tokens.restore(connection, app: "shop", tokens: [], reason: "DeviceTokenNotForTopic") == 0)
        }
    }

    @Test func unregisteredWithATimestampBeforeTheLastRegistrationKeepsTheToken() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let token = Fixtures.token(8)
            try tokens.register(connection, app: "shop", token: token)
            let registered = try updatedAt(connection, token)
            let pruned = try tokens.prune(connection, app: "shop", token: token, reason: "Unregistered",
                                          apnsTimestamp: registered.addingTimeInterval(-1))
            #expect(!pruned)
            #expect(try tokens.token(connection, app: "shop", token: token)?.isLive == true)
        }
    }

    /// An application's transaction holding a token's row past the pruner's `lock_timeout`
    /// failed the prune, and with it the batch's transaction: every answer of the batch was
    /// thrown away and its jobs sent again, while the lock lasted.
    @Test func aPruneTheDatabaseDoesNotWriteLeavesTheTokensAndTheTransactionUsable() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let holder = try database.connect()
            let token = Fixtures.token(7)
            try tokens.register(connection, app: "shop", token: token)
            try holder.execute(script: "BEGIN")
            try holder.query("SELECT 1 FROM pushd.device_tokens WHERE token = $1 FOR UPDATE", [token])
            try connection.execute(script: "SET lock_timeout = '300ms'")
            let prune = TokenPrune(app: "shop", token: token, reason: "BadDeviceToken", apnsTimestamp: nil)
            // Inside a transaction (a claimed batch)…
            try connection.execute(script: "BEGIN")
            try connection.query("CREATE TEMPORARY TABLE written (n int)")
            let inside = try tokens.prune(connection, [prune])
            #expect(inside.invalidated.isEmpty)
            #expect(inside.failed.map(\.prune) == [prune])
            #expect(inside.failed.first?.check == nil)
            #expect(inside.failed.first?.message.contains("55P03") == true, "\(inside.failed)")
            try connection.query("INSERT INTO written VALUES (1)")
            try connection.execute(script: "COMMIT")
            #expect(try connection.query("SELECT count(*) FROM written").require(Int.self, row: 0, column: 0) == 1)
            // …and outside one (a campaign chunk's checkpoint).
            let outside = try tokens.prune(connection, [prune])
            #expect(outside.failed.count == 1)
            try holder.execute(script: "ROLLBACK")
            #expect(try tokens.token(connection, app: "shop", token: token)?.invalidatedAt == nil)
            #expect(try tokens.prune(connection, [prune]).invalidated == [prune])
        }
    }

    @Test func unregisteredWithATimestampAfterTheLastRegistrationInvalidatesTheToken() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let token = Fixtures.token(9)
            try tokens.register(connection, app: "shop", token: token)
            let registered = try updatedAt(connection, token)
            let pruned = try tokens.prune(connection, app: "shop", token: token.uppercased(), reason: "Unregistered",
                                          apnsTimestamp: registered.addingTimeInterval(1))
            #expect(pruned)
            let row = try #require(try tokens.token(connection, app: "shop", token: token))
            #expect(row.invalidReason == "Unregistered")
            #expect(row.invalidatedAt != nil)
        }
    }

    @Test func aTokenNeverRegisteredIsRecordedAsPrunedForTheEnvironmentThatAnswered() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let outcome = try tokens.prune(connection, [
                TokenPrune(app: "shop", token: Fixtures.token(20).uppercased(), reason: "Unregistered",
                           apnsTimestamp: Timestamp().addingTimeInterval(-3600), environment: "sandbox"),
                TokenPrune(app: "shop", token: Fixtures.token(21), reason: "BadDeviceToken", apnsTimestamp: nil),
                // The same token twice in one batch is one prune.
                TokenPrune(app: "shop", token: Fixtures.token(21), reason: "BadDeviceToken", apnsTimestamp: nil),
            ])
            #expect(outcome.invalidated.count == 2)
            #expect(outcome.keptByTimestamp.isEmpty)
            let unregistered = try #require(try tokens.token(connection, app: "shop", token: Fixtures.token(20)))
            #expect(!unregistered.isLive)
            #expect(unregistered.invalidReason == "Unregistered")
            #expect(unregistered.environment == "sandbox")
            #expect(try tokens.token(connection, app: "shop", token: Fixtures.token(21))?.environment == "production")
            // Already pruned: a second answer changes nothing and counts nothing.
            #expect(try tokens.prune(connection, app: "shop", token: Fixtures.token(20), reason: "Unregistered", apnsTimestamp: nil) == false)
            // A registration revives it.
            try tokens.register(connection, app: "shop", token: Fixtures.token(20), environment: "sandbox")
            #expect(try tokens.token(connection, app: "shop", token: Fixtures.token(20))?.isLive == true)
        }
    }

    @Test func batchPruneAppliesTheTimestampRulePerToken() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            for seed in 1...3 { try tokens.register(connection, app: "shop", token: Fixtures.token(seed)) }
            let registered = try updatedAt(connection, Fixtures.token(1))
            let outcome = try tokens.prune(connection, [
                TokenPrune(app: "shop", token: Fixtures.token(1), reason: "Unregistered", apnsTimestamp: registered.addingTimeInterval(-5)),
                TokenPrune(app: "shop", token: Fixtures.token(2), reason: "ExpiredToken", apnsTimestamp: registered.addingTimeInterval(5)),
                TokenPrune(app: "shop", token: Fixtures.token(3), reason: "DeviceTokenNotForTopic", apnsTimestamp: nil),
                TokenPrune(app: "blog", token: Fixtures.token(3), reason: "BadDeviceToken", apnsTimestamp: nil),
            ])
            // blog never registered token 3: recorded as pruned for blog.
            #expect(outcome.invalidated.map { "\($0.app) \($0.token)" }
                    == ["shop \(Fixtures.token(2))", "shop \(Fixtures.token(3))", "blog \(Fixtures.token(3))"])
            #expect(outcome.keptByTimestamp.map(\.token) == [Fixtures.token(1)])
            #expect(try tokens.token(connection, app: "shop", token: Fixtures.token(1))?.isLive == true)
            #expect(try tokens.token(connection, app: "shop", token: Fixtures.token(2))?.isLive == false)
            #expect(try tokens.token(connection, app: "shop", token: Fixtures.token(3))?.isLive == false)
        }
    }

    @Test func countsAndPruneReasonsArePerAppAndReason() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            for seed in 1...5 { try tokens.register(connection, app: "shop", token: Fixtures.token(seed)) }
            try tokens.register(connection, app: "shop", token: Fixtures.token(6), environment: "sandbox")
            try tokens.register(connection, app: "news", token: Fixtures.token(7))
            #expect(try tokens.prune(connection, app: "shop", token: Fixtures.token(1), reason: "BadDeviceToken", apnsTimestamp: nil))
            #expect(try tokens.prune(connection, app: "shop", token: Fixtures.token(2), reason: "Unregistered", apnsTimestamp: nil))
            #expect(try tokens.prune(connection, app: "shop", token: Fixtures.token(3), reason: "Unregistered", apnsTimestamp: nil))

            let counts = try tokens.counts(connection)
            #expect(counts.map(\.app) == ["news", "shop"])
            let shop = try #require(counts.last)
            #expect(shop.live == 3 && shop.liveProduction == 2 && shop.liveSandbox == 1)
            #expect(shop.pruned == 3 && shop.prunedLastDay == 3 && shop.lastPruned != nil)
            #expect(try tokens.counts(connection, app: "news").map(\.live) == [1])
            #expect(try tokens.counts(connection, app: "absent").isEmpty)

            #expect(try tokens.pruneReasons(connection) == [
                PruneReasonCount(app: "shop", reason: "Unregistered", tokens: 2),
                PruneReasonCount(app: "shop", reason: "BadDeviceToken", tokens: 1),
            ])
            #expect(try tokens.pruneReasons(connection, app: "news").isEmpty)
        }
    }

    @Test func registeringAMalformedTokenNamesTheColumnAndTheProblem() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let error = Fixtures.pgError { try tokens.register(connection, app: "shop", token: "not-a-token") }
            #expect(error?.code == .checkViolation)
            #expect(error?.message.hasPrefix("pushd.device_tokens.token must be hexadecimal, found 'n'") == true)
            let environment = Fixtures.pgError { try tokens.register(connection, app: "shop", token: Fixtures.token(1), environment: "staging") }
            #expect(environment?.message.hasPrefix("pushd.device_tokens.environment must be production or sandbox") == true)
        }
    }
}
