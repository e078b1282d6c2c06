import APNs
import Posix
import APNsMock
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

@Suite(.serialized) struct ProviderTokenTests {
    @Test func aSharedTokenOlderThanItsRowSaysIsReplacedBeforeItIsSent() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            // Another instance stored a token 61 minutes old while its row says "just now":
            // pushd judges a token by its own `iat`, as APNs does, so it never sends it.
            let key = try SigningKey(contentsOfFile: harness.keyFile, keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID)
            let stale = try ProviderTokenSigner(key: key).makeToken(issuedAt: Int64(Timestamp().timeIntervalSince1970) - 3660)
            try connection.query("INSERT INTO pushd.provider_tokens (key_id, team_id, token, issued_at) VALUES ($1, $2, $3, now())",
                                 [DaemonHarness.keyID, DaemonHarness.teamID, stale.jwt])
            var config = harness.config()
            config.apns.providerTokenRefreshSeconds = 3300
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(5)])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.acceptedLog.count == 1)
            #expect(harness.mock.stats.rejected.isEmpty, "\(harness.mock.stats.rejected)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let stored = try connection.query("SELECT token FROM pushd.provider_tokens").require(String.self, row: 0, column: 0)
            #expect(stored != stale.jwt)
            let text = pipeline.context.metrics.registry.expositionText()
            // One token adopted: the one minted in place of the stale one.
            #expect(text.contains("pushd_jwt_refreshes_total{app=\"shop\"} 1"), "\(text.split(separator: "\n").filter { $0.contains("jwt") })")
        }
    }

    /// A host clock over 40 minutes off: APNs calls every token this host mints expired. The
    /// app is paused with one line that says so, and its jobs are kept; before, each answer
    /// spent one of a job's attempts, and every job was dead-lettered within seconds.
    @Test func tokensCalledExpiredAsSoonAsTheyAreMintedPauseTheAppAndKeepItsJobs() throws {
        try IsolatedDatabase.with { database in
            // The mock counts a token over a second old as expired: as APNs does for one from a
            // host whose clock is an hour behind.
            let harness = try DaemonHarness(database: database, providerTokenMaximumAgeSeconds: 1)
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(1)])
            Thread.sleep(forTimeInterval: 2.5)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{"aps":{"alert":"hi"}}' FROM generate_series(1, 5)
                """, [DaemonHarness.token(6)])
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { sender.pausedReason?.contains("clock") == true }, "\(sender.pausedReason ?? "not paused")")
            Thread.sleep(forTimeInterval: 2)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs WHERE device_token = $1", [DaemonHarness.token(6)])
                .require(Int.self, row: 0, column: 0) == 5)
            #expect(harness.mock.stats.rejected("ExpiredProviderToken") >= 1)
            #expect(pipeline.context.pausedApps() == ["shop"])
        }
    }

    @Test func invalidProviderTokenPausesTheAppAndKeepsItsJobs() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, trustsPushdKey: false)
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{"aps":{"alert":"hi"}}' FROM generate_series(1, 3)
                """, [DaemonHarness.token(6)])
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { sender.pausedReason == "InvalidProviderToken" })
            Thread.sleep(forTimeInterval: 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE attempts = 0") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(harness.mock.acceptedLog.isEmpty)
            #expect(pipeline.context.pausedApps() == ["shop"])
            let text = pipeline.context.metrics.registry.expositionText()
            #expect(text.contains("pushd_apns_responses_total{app=\"shop\",environment=\"sandbox\",status=\"403\",reason=\"InvalidProviderToken\"}"))
            #expect(text.contains("pushd_app_paused{app=\"shop\"} 1"))
        }
    }

    /// Apple documents 403 as "an error with the certificate or with the provider
    /// authentication token": a reason pushd does not know, or none at all, still means the
    /// credentials are refused, so the app pauses with its jobs kept, as for InvalidProviderToken.
    @Test(arguments: ["CredentialsRevokedSomehow", ""])
    func a403WithAnUnknownReasonOrNonePausesTheAppAndKeepsItsJobs(reason: String) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenReason: reason))
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{"aps":{"alert":"hi"}}' FROM generate_series(1, 3)
                """, [DaemonHarness.token(6)])
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { sender.pausedReason != nil })
            #expect(sender.pausedReason == (reason.isEmpty ? "HTTP 403" : reason))
            Thread.sleep(forTimeInterval: 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(pipeline.context.pausedApps() == ["shop"])
            #expect(pipeline.context.metrics.registry.expositionText().contains("pushd_app_paused{app=\"shop\"} 1"))
        }
    }
}
