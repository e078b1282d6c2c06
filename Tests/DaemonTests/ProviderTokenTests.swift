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

    /// Another instance with a different `.p8` for the same key id stored its token. pushd
    /// checks the signature with its own key before taking a token over: it mints its own,
    /// stores that in place of the foreign one, says so once, and sends at once instead of
    /// earning InvalidProviderToken and a pause of the app.
    @Test func aStoredTokenSignedByAnotherKeyFileIsNotTakenOver() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let otherKeyFile = harness.directory + "/other-instance.p8"
            try DaemonHarness.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", otherKeyFile])
            let otherKey = try SigningKey(contentsOfFile: otherKeyFile, keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID)
            let foreign = try ProviderTokenSigner(key: otherKey).makeToken(issuedAt: Int64(Timestamp().timeIntervalSince1970) - 60)
            try connection.query("""
                INSERT INTO pushd.provider_tokens (key_id, team_id, token, issued_at, minted_by) VALUES ($1, $2, $3, now(), 'other')
                """, [DaemonHarness.keyID, DaemonHarness.teamID, foreign.jwt])
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            for seed in 1...3 {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                     [DaemonHarness.token(seed)])
            }
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "paused: \(sender.pausedReason ?? "no"), rejected: \(harness.mock.stats.rejected)")
            #expect(sender.pausedReason == nil)
            #expect(harness.mock.stats.rejected.isEmpty, "\(harness.mock.stats.rejected)")
            #expect(harness.mock.acceptedLog.count == 3)

            // The table now holds a token of pushd's own key, for the instances that share it.
            let stored = try connection.query("SELECT token, minted_by FROM pushd.provider_tokens")
            let storedToken = try stored.require(String.self, row: 0, column: 0)
            #expect(storedToken != foreign.jwt)
            #expect(try stored.get(String.self, row: 0, column: 1) == "test")
            let ownKey = try SigningKey(contentsOfFile: harness.keyFile, keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID)
            let decoded = try DecodedProviderToken(jwt: storedToken)
            #expect(try ownKey.publicKey.verify(signature: decoded.signature, message: decoded.signingInput))

            let foreignLines = log.lines.filter { $0.contains("provider_token_foreign") }
            #expect(foreignLines.count == 1, "\(log.lines)")
            #expect(foreignLines.first?.contains("the provider token stored for key \(DaemonHarness.keyID) team \(DaemonHarness.teamID) (stored by instance other) is not signed by this instance's key file \(harness.keyFile)") == true,
                    "\(foreignLines)")
            let text = pipeline.context.metrics.registry.expositionText()
            #expect(text.contains("pushd_provider_tokens_foreign_total{app=\"shop\"} 1"), "\(text.split(separator: "\n").filter { $0.contains("provider_tokens_foreign") })")
        }
    }

    /// APNs refuses the token: it must leave the shared table, so that no instance of the fleet
    /// (one fixed and restarted among them) is handed it again, and the next to ask mints anew.
    @Test func aTokenAPNsCallsInvalidIsRemovedFromTheSharedTable() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, trustsPushdKey: false)
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(7)])
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { sender.pausedReason == "InvalidProviderToken" })
            let key = try #require(sender.tokenKey)
            let refused = try #require(sender.tokens.held(key)).jwt
            func stored() throws -> Int {
                try connection.query("SELECT count(*) FROM pushd.provider_tokens WHERE token = $1", [refused]).require(Int.self, row: 0, column: 0)
            }
            #expect(try DaemonHarness.wait(seconds: 5) { try stored() == 0 }, "the refused token is still stored \((try? stored()) ?? -1) time(s)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 1)
        }
    }

    /// The fleet: one instance has the wrong `.p8` for the key id, mints first and is refused.
    /// An instance with the right file, started next to it (or the same one, fixed and
    /// restarted), sends at once: it neither takes the refused token over nor waits for it to
    /// age out of the table.
    @Test func anInstanceWithTheWrongKeyFileDoesNotStopTheOneWithTheRightOne() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let wrongKeyFile = harness.directory + "/wrong.p8"
            try DaemonHarness.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", wrongKeyFile])
            var wrongConfig = harness.config()
            wrongConfig.apps[0].credentials = .token(teamID: DaemonHarness.teamID, keyID: DaemonHarness.keyID, keyFile: wrongKeyFile)
            let wrong = try harness.pipeline(wrongConfig, instance: "wrong")
            wrong.start()
            defer { wrong.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(1)])
            let wrongSender = try #require(wrong.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { wrongSender.pausedReason == "InvalidProviderToken" })

            // The refused job waits 30 s for the paused app; the other instance may send it now.
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE last_error LIKE 'app paused%'") == 1
            })
            try connection.query("UPDATE pushd.jobs SET run_at = now()")
            let right = try harness.pipeline(instance: "right")
            right.start()
            defer { right.stop(deadline: Timestamp().addingTimeInterval(5)) }
            for seed in 2...4 {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                     [DaemonHarness.token(seed)])
            }
            let rightSender = try #require(right.context.senders["shop"])
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "right instance paused: \(rightSender.pausedReason ?? "no"), rejected: \(harness.mock.stats.rejected)")
            #expect(rightSender.pausedReason == nil)
            #expect(harness.mock.acceptedLog.count == 4)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
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

    /// A pipeline whose tokens APNs calls expired 3 s after their `iat` (changes allowed every
    /// second, on both sides; pushd would refresh only after 55 minutes, so only
    /// ExpiredProviderToken replaces a token here). One job is delivered with the first token,
    /// which is past its 3 s when `body` runs: whatever is sent next goes out with it.
    private static func withATokenJustExpired(
        _ body: (DaemonHarness, PGConnection, AppSender) throws -> Void) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, providerTokenUpdateWindowSeconds: 1, providerTokenMaximumAgeSeconds: 3)
            let connection = try database.connect()
            var config = harness.config()
            config.apns.providerTokenUpdateWindowSeconds = 1
            config.apns.providerTokenRefreshSeconds = 3300
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(config, log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(100)])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 4.5)
            let sender = try #require(pipeline.context.senders["shop"])
            try body(harness, connection, sender)
            #expect(sender.pausedReason == nil)
            #expect(pipeline.context.pausedApps().isEmpty)
            #expect(!log.lines.contains { $0.contains("clock is probably") }, "\(log.lines)")
            #expect(harness.mock.stats.rejected("ExpiredProviderToken") >= 1)
            let text = pipeline.context.metrics.registry.expositionText()
            // The first token and the one that replaced it: no second replacement.
            #expect(text.contains("pushd_jwt_refreshes_total{app=\"shop\"} 2"), "\(text.split(separator: "\n").filter { $0.contains("jwt") })")
            #expect(text.contains("pushd_app_paused{app=\"shop\"} 0"))
        }
    }

    /// Several requests with one token in flight when APNs calls it expired: the first answer
    /// replaces the token, and the others, about the token replaced, change nothing. Before,
    /// each of them was judged against the token just minted, "called expired as soon as it
    /// was minted", and the app was paused for a clock that was right.
    @Test func answersAboutATokenAlreadyReplacedNeitherReplaceItAgainNorPauseTheApp() throws {
        try Self.withATokenJustExpired { harness, connection, sender in
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1 || lpad(to_hex(n), 4, '0'), '{"aps":{"alert":"hi"}}'
                FROM generate_series(1, 5) AS n
                """, [String(DaemonHarness.token(2).dropLast(4))])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "paused: \(sender.pausedReason ?? "no"), rejected: \(harness.mock.stats.rejected)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            // Each of the six delivered once.
            #expect(harness.mock.acceptedLog.count == 6)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 6)
        }
    }

    /// The same in the campaign lane: a chunk's requests go out together with one token.
    @Test func aCampaignChunkCalledExpiredReplacesTheTokenOnceAndIsSentWithoutAPause() throws {
        try Self.withATokenJustExpired { harness, connection, sender in
            let id = try CampaignLaneTests.campaign(connection, count: 20)
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done },
                    "paused: \(sender.pausedReason ?? "no"), rejected: \(harness.mock.stats.rejected)")
            #expect(try store.campaign(connection, id: id)?.sent == 20)
            #expect(harness.mock.acceptedLog.count == 21)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 21)
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

    /// A 403 without a body names no reason at all: the credentials are taken as refused, so
    /// the app pauses with its jobs kept, as for InvalidProviderToken.
    @Test func a403WithoutAReasonPausesTheAppAndKeepsItsJobs() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenReason: ""))
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{"aps":{"alert":"hi"}}' FROM generate_series(1, 3)
                """, [DaemonHarness.token(6)])
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { sender.pausedReason != nil })
            #expect(sender.pausedReason == "HTTP 403")
            Thread.sleep(forTimeInterval: 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(pipeline.context.pausedApps() == ["shop"])
            #expect(pipeline.context.metrics.registry.expositionText().contains("pushd_app_paused{app=\"shop\"} 1"))
        }
    }

    /// A 403 whose reason Apple does not document is not proven to refuse the credentials
    /// (Forbidden, also a 403, refuses one request): it is taken like Forbidden. Each
    /// notification fails with the reason named verbatim, one warning line names it, and the
    /// app is not paused; only a run of `apns.forbidden_limit` holds the environment. It used
    /// to pause the whole app "as credentials rejected" on the first such answer.
    @Test func a403WithAnUnknownReasonFailsItsNotificationLikeForbiddenNamingTheReason() throws {
        let reason = "CredentialsRevokedSomehow"
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenReason: reason))
            let connection = try database.connect()
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{"aps":{"alert":"hi"}}' FROM generate_series(1, 3)
                """, [DaemonHarness.token(6)])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 3 },
                    "\(log.lines)")
            let failed = "\(reason): APNs answered 403 \(reason), a 403 reason pushd does not know: taken like Forbidden (the action is not allowed, the credentials not proven refused); not retried"
            let named = try connection.query("SELECT count(*) FROM pushd.dead_jobs WHERE reason = $1", [failed]).require(Int.self, row: 0, column: 0)
            #expect(named == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0)
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(sender.pausedReason == nil)
            #expect(pipeline.context.pausedApps().isEmpty)
            #expect(pipeline.context.heldScopes().isEmpty)
            let lines = log.lines.filter { $0.contains(#""event":"apns_forbidden""#) }
            #expect(lines.count == 1, "\(log.lines)")
            for expected in [#""level":"warning""#, "APNs answered 403 \(reason) to a notification of app shop in sandbox",
                             "a 403 reason pushd does not know, taken like Forbidden", #""reason":"\#(reason)""#] {
                #expect(lines.first?.contains(expected) == true, "no \(expected) in \(lines)")
            }
            #expect(!log.lines.contains { $0.contains("is paused") }, "\(log.lines)")
            let text = pipeline.context.metrics.registry.expositionText()
            #expect(text.contains("pushd_app_paused{app=\"shop\"} 0"))
            #expect(text.contains(#"pushd_dead_letters_total{app="shop",lane="transactional",reason="unknown"} 3"#), "\(text)")
        }
    }
}
