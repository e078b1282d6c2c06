import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd tokens prune-stats`: live and pruned tokens per app, then pruned ones by reason.
@Suite struct TokensCommandTests {
    static func token(_ seed: Int) -> String { String(format: "%064x", seed) }

    static func stats(_ database: IsolatedDatabase, _ extra: [String] = []) throws -> CommandRun {
        try CommandRun(["tokens", "prune-stats", "--database-url", database.url] + extra, TokensCommand.pruneStats)
    }

    @Test func countsLiveAndPrunedTokensPerAppAndReason() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let tokens = TokenStore()
            for seed in 0..<6 { try tokens.register(connection, app: "shop", token: Self.token(seed)) }
            for seed in 6..<8 { try tokens.register(connection, app: "shop", token: Self.token(seed), environment: "sandbox") }
            for seed in 10..<13 { try tokens.register(connection, app: "news", token: Self.token(seed)) }
            try tokens.prune(connection, [
                TokenPrune(app: "shop", token: Self.token(0), reason: "Unregistered", apnsTimestamp: Timestamp()),
                TokenPrune(app: "shop", token: Self.token(1), reason: "Unregistered", apnsTimestamp: Timestamp()),
                TokenPrune(app: "shop", token: Self.token(6), reason: "BadDeviceToken", apnsTimestamp: nil),
                TokenPrune(app: "news", token: Self.token(10), reason: "DeviceTokenNotForTopic", apnsTimestamp: nil),
            ])
            let run = try Self.stats(database)
            #expect(run.exitCode == 0)
            let lines = run.output.output
            #expect(lines[0] == "APP   LIVE  PRODUCTION  SANDBOX  PRUNED  PRUNED 24H  LAST PRUNED")
            #expect(lines[1].hasPrefix("news  2     2           0        1       1           20"))
            #expect(lines[2].hasPrefix("shop  5     4           1        3       3           20"))
            #expect(Array(lines[3...]) == [
                "",
                "pruned by reason:",
                "APP   REASON                  TOKENS",
                "news  DeviceTokenNotForTopic  1",
                "shop  Unregistered            2",
                "shop  BadDeviceToken          1",
            ])

            let one = try Self.stats(database, ["--app", "news"])
            #expect(one.output.output.count == 6)
            #expect(!one.output.text.contains("shop"))
        }
    }

    @Test func anAppWithoutTokensSaysSo() throws {
        try IsolatedDatabase.with { database in
            #expect(try Self.stats(database).output.text == "no tokens registered")
            let run = try Self.stats(database, ["--app", "ghost"])
            #expect(run.exitCode == 0)
            #expect(run.output.text == "no tokens registered for app 'ghost'")
        }
    }

    @Test func withoutADatabaseTheCommandSaysWhereToGetOne() throws {
        let run = try CommandRun(["tokens", "prune-stats"], TokensCommand.pruneStats)
        #expect(run.exitCode == 1)
        #expect(run.output.errorText.contains("no database: pass --database-url, set PUSHD_DATABASE_URL or give --config FILE")
                || run.output.errorText.contains("/etc/pushd/pushd.yml"))
    }
}
