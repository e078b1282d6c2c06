import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs answers TooManyProviderTokenUpdates to a token change on a connection within 20
/// minutes of the previous one. Here apns-mock enforces an 8-second window and the real
/// `pushd run` is told the same, so several refresh periods pass in a test.
@Suite(.serialized) struct ProviderTokenUpdateWindowTests {
    static let window = 8

    /// The test plays another pushd instance of the fleet, minting into `pushd.provider_tokens`
    /// whenever the shared token is a refresh period old. pushd, idle meanwhile, comes back to
    /// a token minted while it slept: switching away from it at that token's age would be a
    /// second change within the window on its open connection.
    @Test func aTokenTakenOverFromTheFleetIsHeldForTheWindowSoNoConnectionEarnsTooManyUpdates() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, providerTokenUpdateWindowSeconds: Self.window)
            let connection = try database.connect()
            let key = try SigningKey(contentsOfFile: harness.keyFile, keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID)
            let signer = ProviderTokenSigner(key: key)
            let start = Int64(Timestamp().timeIntervalSince1970)
            try Self.share(signer.makeToken(issuedAt: start), connection)

            let config = try Self.writeConfig(harness, refresh: Self.window)
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

            var seed = 0
            func enqueue(_ count: Int) throws {
                for _ in 0..<count {
                    seed += 1
                    try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                         [DaemonHarness.token(seed)])
                }
            }
            func sleep(until offset: Int64) {
                let wait = Double(start + offset) - Timestamp().timeIntervalSince1970
                if wait > 0 { Thread.sleep(forTimeInterval: wait) }
            }

            // pushd takes over the shared token on its first send and opens its connection.
            try enqueue(1)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 1 }, "\(Self.read(log))")
            // The other instance refreshes at start + 8 while pushd is idle.
            sleep(until: Int64(Self.window))
            try Self.share(signer.makeToken(issuedAt: start + Int64(Self.window)), connection)
            // pushd wakes at start + 13: its token is due, it takes over the 5-second-old one.
            sleep(until: 13)
            try enqueue(1)
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.accepted == 2 })
            // The other instance refreshes again at start + 16; pushd sends on for 14 seconds,
            // through the end of its window and one more refresh period.
            sleep(until: 2 * Int64(Self.window))
            try Self.share(signer.makeToken(issuedAt: start + 2 * Int64(Self.window)), connection)
            while Int64(Timestamp().timeIntervalSince1970) < start + 30 {
                try enqueue(5)
                Thread.sleep(forTimeInterval: 0.3)
            }
            #expect(DaemonHarness.wait(seconds: 30) { (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs")) == 0 })
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 15))

            let stats = harness.mock.stats
            #expect(stats.rejected("TooManyProviderTokenUpdates") == 0, "\(stats.rejected)")
            #expect(stats.accepted == seed)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            // One connection carried every token: the first, the one taken over at +13, and a
            // third after the window (minted by the test at +16 or by pushd itself later).
            #expect(stats.connectionsAccepted == 1, "\(Self.read(log))")
            #expect(stats.providerTokenVerifications >= 3)
        }
    }

    @Test func aRefreshOutsideTwentyToFiftyFiveMinutesIsRefusedByCheckConfigAndRun() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            for refresh in [60, 3400] {
                let config = try Self.writeConfig(harness, refresh: refresh, window: nil)
                for command in ["check-config", "run"] {
                    let process = ChildProcess()
                    process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
                    process.arguments = command == "run" ? ["run", "--config", config] : ["check-config", config]
                    process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
                    let output = Pipe()
                    process.standardOutput = output
                    process.standardError = output
                    try process.run()
                    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                    process.waitUntilExit()
                    #expect(process.terminationStatus == 1, "\(command) with \(refresh) s: \(text)")
                    #expect(text.contains("apns.provider_token_refresh_s"), "\(text)")
                    #expect(text.contains("outside 1200–3300 s"), "\(text)")
                }
            }
        }
    }

    /// Stores `token` as the fleet's shared one, as `ProviderTokenStore` does when it mints.
    static func share(_ token: ProviderToken, _ connection: PGConnection) throws {
        try connection.query("""
            INSERT INTO pushd.provider_tokens (key_id, team_id, token, issued_at, minted_by)
            VALUES ($1, $2, $3, to_timestamp($4::float8), 'test')
            ON CONFLICT (key_id, team_id) DO UPDATE SET token = EXCLUDED.token, issued_at = EXCLUDED.issued_at,
                minted_by = EXCLUDED.minted_by
            """, [DaemonHarness.keyID, DaemonHarness.teamID, token.jwt, Double(token.issuedAt)])
    }

    /// The harness's configuration file with the provider-token settings under `apns`.
    static func writeConfig(_ harness: DaemonHarness, refresh: Int, window: Int? = ProviderTokenUpdateWindowTests.window) throws -> String {
        let path = try harness.writeConfigFile()
        var text = try String(contentsOfFile: path, encoding: .utf8)
        var settings = "  provider_token_refresh_s: \(refresh)\n"
        if let window { settings += "  provider_token_update_window_s: \(window)\n" }
        text = text.replacingOccurrences(of: "  threads: 1\n", with: "  threads: 1\n" + settings)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
}
