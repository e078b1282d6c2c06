import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import Metrics
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The real `pushd run` carrying out channel requests and broadcasts that applications made
/// in SQL, against apns-mock's channel management listener and broadcast API.
@Suite(.serialized) struct BroadcastDaemonTests {
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#

    @Test func aChannelCreatedInSQLIsBroadcastToAndDeletedByTheRunningDaemon() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let config = try harness.writeConfigFile()
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

            let row = try connection.query("SELECT pushd.create_channel('shop', 'most-recent')").require(Int64.self, row: 0, column: 0)
            var channel: String?
            let created = DaemonHarness.wait(seconds: 20) {
                let result = try? connection.query("SELECT channel_id, state, environment FROM pushd.channels WHERE id = $1", [row])
                guard (try? result?.require(String.self, row: 0, column: 1)) == "active" else { return false }
                channel = try? result?.require(String.self, row: 0, column: 0)
                return (try? result?.require(String.self, row: 0, column: 2)) == "sandbox"
            }
            let logText = { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
            #expect(created, "\(logText())")
            let channelID = try #require(channel)
            #expect(harness.mock.stats.channelsCreated == 1)
            // The apns-request-id pushd sent (APNs echoes it, and quotes it in errors) is kept
            // with the row, for a question to Apple about the request.
            let createdOutcome = try connection.query("SELECT outcome FROM pushd.channels WHERE id = $1", [row]).require(String.self, row: 0, column: 0)
            #expect(createdOutcome.range(of: #"^created \(apns-request-id [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\)$"#,
                                         options: .regularExpression) != nil, "\(createdOutcome)")

            for _ in 0..<2 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                     [channelID, Self.update])
            }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.broadcastsAccepted[channelID] == 2 }, "\(logText())")
            #expect(DaemonHarness.wait(seconds: 5) { (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs")) == 0 })

            // A channel APNs does not know: dead-lettered with the documented reason, never retried.
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', 'bm8tc3VjaC1jaGFubmVs', $1)", [Self.update])
            #expect(DaemonHarness.wait(seconds: 20) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason LIKE 'ChannelNotRegistered%' AND channel_id IS NOT NULL")) == 1
            }, "\(logText())")
            #expect(harness.mock.stats.rejected("ChannelNotRegistered") == 1)

            try connection.query("SELECT pushd.delete_channel('shop', $1)", [channelID])
            #expect(DaemonHarness.wait(seconds: 20) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'deleted' AND outcome LIKE 'deleted (apns-request-id %)'")) == 1
            }, "\(logText())")
            #expect(harness.mock.stats.channelsLive == 0)

            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 15), "\(logText())")
            #expect(process.terminationStatus == 0, "\(logText())")
        }
    }

    /// Twenty broadcasts to a channel APNs does not know are dead-lettered together: every one
    /// is counted, and the log has one line for the app and reason, not one per broadcast.
    /// An instance claimed a channel create and a broadcast and stopped before recording an
    /// outcome (`kill -9`, a lost database): once their leases end, the running daemon takes
    /// them over and says so, since APNs may have carried them out already; a create taken
    /// over may leave a channel at APNs that pushd has no record of. Before, both were carried
    /// out again without a word.
    @Test func aChannelCreateAndABroadcastLeftUnsettledAreTakenOverWithAWarningEach() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            // The instance that stopped: it claimed both for half a second and recorded nothing.
            let row = try connection.query("SELECT pushd.create_channel('shop', 'none')").require(Int64.self, row: 0, column: 0)
            #expect(try ChannelStore().claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.5).map(\.id) == [row])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', 'bm8tc3VjaC1jaGFubmVs', $1)", [Self.update])
            let job = try #require(try BroadcastQueue().claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.5).first)
            Thread.sleep(forTimeInterval: 0.7)

            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            let logText = { daemon.text }
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active'") == 1
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
            }, "\(logText())")
            let lines = logText().split(separator: "\n")
            let create = lines.filter { $0.contains("channel_request_taken_over") }
            #expect(create.count == 1 && create.first?.contains("\"request\":\(row)") == true, "\(lines)")
            let broadcast = lines.filter { $0.contains("broadcast_taken_over") }
            #expect(broadcast.count == 1 && broadcast.first?.contains("\"job\":\(job.id)") == true, "\(lines)")
            #expect(harness.mock.stats.channelsCreated == 1)
            // The warning names the command that finds a channel left at APNs, and each takeover is counted.
            #expect(create.first?.contains("pushd channels audit --app shop") == true, "\(create)")
            let scrape = daemon.metrics()
            #expect(scrape.contains(#"pushd_lease_takeovers_total{app="shop",lane="channel_create"} 1"#), "\(scrape)")
            #expect(scrape.contains(#"pushd_lease_takeovers_total{app="shop",lane="broadcast"} 1"#), "\(scrape)")
        }
    }

    @Test func manyBroadcastsDeadLetteredAtOnceMakeOneLogLine() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(log: log)
            let connection = try database.connect()
            defer { connection.close() }
            for _ in 0..<20 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', 'bm8tc3VjaC1jaGFubmVs', $1)", [Self.update])
            }
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason LIKE 'ChannelNotRegistered%'") == 20
            })
            #expect(harness.mock.stats.rejected("ChannelNotRegistered") == 20)
            #expect(DaemonHarness.wait(seconds: 5) {
                pipeline.context.metrics.registry.expositionText()
                    .contains(#"pushd_dead_letters_total{app="shop",lane="broadcast",reason="ChannelNotRegistered"} 20"#)
            })
            let lines = log.lines.filter { $0.contains("dead-lettered") && $0.contains("broadcast") }
            #expect(lines.count == 1, "\(lines.count) lines: \(lines.prefix(3))")
            #expect(lines.first.map { $0.contains(#""event":"broadcast_dead_lettered""#) && $0.contains(#""reason":"ChannelNotRegistered""#)
                && $0.contains(#""app":"shop""#) } == true, "\(lines.prefix(3))")
        }
    }

    /// The operator's summary line counts the broadcast lane's retries and dead letters with the
    /// other lanes': it said "0 retries, 0 dead letters" while broadcasts were being refused.
    @Test func broadcastRetriesAndDeadLettersAreInTheSummaryLine() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(tooManyRequestsRate: 0.3))
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            var config = harness.config()
            config.logSummarySeconds = 1
            let log = MemoryLogSink()
            let pipeline = try Pipeline(config: config, metrics: try PushdMetrics(version: "test"),
                                        logger: Logger(level: .info, sink: log), instance: "test")
            let connection = try database.connect()
            defer { connection.close() }
            for _ in 0..<10 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, Self.update])
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', 'bm8tc3VjaC1jaGFubmVs', $1)", [Self.update])
            }
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 60) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
            })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason LIKE 'ChannelNotRegistered%'") == 10)
            let refused = harness.mock.stats.rejected("TooManyRequests")
            #expect(refused > 0)
            // Every count reaches a summary line within the interval after it.
            func summed(_ field: String) -> Int {
                log.lines.filter { $0.contains(#""event":"summary""#) }.reduce(0) { total, line in
                    let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                    return total + (object?[field] as? Int ?? 0)
                }
            }
            #expect(DaemonHarness.wait(seconds: 5) { summed("dead_letters") == 10 && summed("retries") == refused },
                    "dead letters \(summed("dead_letters")), retries \(summed("retries")) of \(refused): \(log.lines.filter { $0.contains("summary") })")
            #expect(log.lines.contains { $0.contains(#""event":"summary""#) && $0.contains("ChannelNotRegistered=") })
        }
    }

    @Test func broadcastsAnsweredTooManyRequestsOrServiceUnavailableAreRetriedUntilAccepted() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database,
                                            faults: FaultConfiguration(tooManyRequestsRate: 0.3, serviceUnavailableRate: 0.2))
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            for _ in 0..<20 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, Self.update])
            }
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.broadcastsAccepted[channel] == 20 })
            // The mock counts a broadcast as it answers; pushd deletes the job and counts it
            // once it has read that answer, a moment later (seconds in a sanitizer build).
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
                    && pipeline.context.metrics.registry.expositionText().contains("pushd_broadcasts_sent_total{app=\"shop\",environment=\"sandbox\"} 20")
            })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(harness.mock.stats.rejected("TooManyRequests") + harness.mock.stats.rejected("ServiceUnavailable") > 0)
            let scrape = pipeline.context.metrics.registry.expositionText()
            #expect(scrape.contains("pushd_broadcasts_sent_total{app=\"shop\",environment=\"sandbox\"} 20"), "\(scrape)")
            #expect(scrape.contains("pushd_retries_total{app=\"shop\",lane=\"broadcast\""))
        }
    }

    /// Each broadcast a worker sends is leased when it is taken, not when a batch of them was:
    /// with answers 4 s away, the last of 16 broadcasts claimed together went out after their
    /// common lease (the answer wait and 30 s) had ended, and another instance, idle, claimed
    /// and sent them too: every subscriber of the channel got them twice.
    @Test func slowAnswersDoNotLetASecondInstanceSendABroadcastTheFirstStillHolds() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 4000))
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            var config = harness.config()
            // The answer wait is 2 × 5 s + 15 s = 25 s, so a lease is 55 s: 16 answers take 64 s.
            config.apns.requestTimeoutMilliseconds = 5000
            let connection = try database.connect()
            defer { connection.close() }
            let count = 16
            for _ in 0..<count {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, Self.update])
            }
            let first = try harness.pipeline(config, instance: "first")
            first.start()
            defer { first.stop(deadline: Timestamp().addingTimeInterval(10)) }
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.broadcastsAccepted[channel, default: 0] >= 1 })
            let second = try harness.pipeline(config, instance: "second")
            second.start()
            defer { second.stop(deadline: Timestamp().addingTimeInterval(10)) }
            #expect(try DaemonHarness.wait(seconds: 90) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
            })
            // Answers still on their way would be counted by now.
            Thread.sleep(forTimeInterval: 5)
            #expect(harness.mock.stats.broadcastsAccepted[channel] == count)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        }
    }

    /// A broadcast scheduled long ahead has its whole outage budget from its first send, as
    /// every job has: its retry windows do not count from its insert.
    @Test func aBroadcastInsertedLongBeforeItIsDueIsRetriedFromItsFirstSendNotDeadLettered() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(serviceUnavailableRate: 1.0))
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let connection = try database.connect()
            defer { connection.close() }
            // Inserted two hours ago to go out now; the outage budget is one minute.
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, Self.update])
            try connection.query("UPDATE pushd.broadcast_jobs SET created_at = now() - interval '2 hours'")
            var config = harness.config()
            config.retry.outageLimitSeconds = 60
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.rejected("ServiceUnavailable") >= 3 },
                    "\(harness.mock.stats.rejected("ServiceUnavailable")) answers of 503")
            let deadReasons = try connection.query("SELECT reason FROM pushd.dead_jobs").rows.map { try $0.require(0) as String }
            #expect(deadReasons.isEmpty, "dead-lettered: \(deadReasons)")
            let waited = try connection.query("""
                SELECT count(*) FROM pushd.broadcast_jobs
                WHERE first_attempt_at > now() - interval '1 minute' AND last_error LIKE '%ServiceUnavailable%'
                """).require(Int.self, row: 0, column: 0)
            #expect(waited == 1, "the broadcast should wait for its retry with its first send recorded")
        }
    }

    /// APNs takes a broadcast with the app's certificate as well as with a provider token
    /// (Apple, "Sending broadcast push notification requests to APNs"): a certificate app's
    /// broadcast goes on a connection that presents its certificate, to a mock that requires
    /// one, and is accepted. One to an environment the app has no certificate for is
    /// dead-lettered unsent, naming the setting. Before, the broadcast was dead-lettered
    /// ("broadcasts need token (JWT) authentication").
    @Test func aCertificateAppsBroadcastIsSentWithItsCertificate() throws {
        try IsolatedDatabase.with { database in
            var world = try TLSFailurePausesAppTests.World(database: database)
            let certificates = world.harness.certificates
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: certificates.caCertificate)
            defer { world.mock.stop() }
            let channel = try #require(world.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            var config = world.harness.config()
            config.apns.hostOverride = "127.0.0.1:\(world.port)"
            config.apps[0].credentials = .certificate(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey,
                                                      pkcs12File: nil, password: nil)
            let pipeline = try world.harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [channel, Self.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, environment) VALUES ('shop', $1, $2, 'production')",
                                 [channel, Self.update])
            let dead = { (try? connection.query("SELECT reason FROM pushd.dead_jobs").rows.map { try $0.require(0) as String }) ?? [] }
            #expect(DaemonHarness.wait(seconds: 20) { world.mock.stats.broadcastsAccepted[channel] == 1 },
                    "accepted: \(world.mock.stats.broadcastsAccepted), dead letters: \(dead())")
            #expect(DaemonHarness.wait(seconds: 20) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs")) == 0
            })
            #expect(dead().count == 1 && dead().allSatisfy { $0.hasPrefix("NoCredentialsForEnvironment: app shop has no certificate for production") },
                    "\(dead())")
            #expect(world.mock.stats.requestsReceived == 1)
        }
    }

    /// APNs takes every channel management request with the app's certificate (Apple, "Sending
    /// channel management requests to APNs": `authorization` is "Required, if mTLS
    /// authentication is omitted" or "Required for token-based authentication", and "APNs
    /// ignores this header if you use certificate-based authentication"): a certificate app's
    /// channel is created and deleted on connections that present its certificate to a
    /// management host that requires one. A request to an environment the app has no
    /// certificate for fails unsent, naming the setting. Before, every channel request of a
    /// certificate app failed ("the channel management API is sent with token (JWT)
    /// authentication only").
    @Test func aCertificateAppsChannelIsCreatedAndDeletedWithItsCertificate() throws {
        try IsolatedDatabase.with { database in
            var world = try TLSFailurePausesAppTests.World(database: database)
            let certificates = world.harness.certificates
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: certificates.caCertificate, channelManagement: true)
            defer { world.mock.stop() }
            var config = world.harness.config()
            config.apns.hostOverride = "127.0.0.1:\(world.port)"
            config.apns.channelHostOverride = "127.0.0.1:\(try #require(world.mock.channelManagementPort))"
            config.apps[0].credentials = .certificate(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey,
                                                      pkcs12File: nil, password: nil)
            let pipeline = try world.harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            let create = try connection.query("SELECT pushd.create_channel('shop', 'most-recent')").require(Int64.self, row: 0, column: 0)
            let elsewhere = try connection.query("SELECT pushd.create_channel('shop', 'none', 'production')").require(Int64.self, row: 0, column: 0)
            let row = { (id: Int64) in try? ChannelStore().row(connection, id: id) }
            #expect(DaemonHarness.wait(seconds: 20) { row(create)?.state == "active" },
                    "\(String(describing: row(create)))")
            let channel = try #require(row(create)?.channelID)
            #expect(world.mock.stats.channelsLive == 1)
            #expect(DaemonHarness.wait(seconds: 20) { row(elsewhere)?.state == "failed" }, "\(String(describing: row(elsewhere)))")
            #expect(row(elsewhere)?.outcome?.hasPrefix("NoCredentialsForEnvironment: app shop has no certificate for production") == true,
                    "\(String(describing: row(elsewhere)?.outcome))")

            let delete = try connection.query("SELECT pushd.delete_channel('shop', $1)", [channel]).require(Int64.self, row: 0, column: 0)
            #expect(DaemonHarness.wait(seconds: 20) { row(delete)?.state == "deleted" }, "\(String(describing: row(delete)))")
            #expect(world.mock.stats.channelsLive == 0)
            #expect(world.mock.stats.clientCertificateSubjects.count >= 1, "\(world.mock.stats.clientCertificateSubjects)")
        }
    }

    /// APNs answers 403 TopicMismatch to a broadcast whose bundle id the key does not cover
    /// (one registered with other letter case, another team's). Only the app's broadcasts and
    /// channel requests are held: its device pushes keep going, the broadcast waits unspent,
    /// and the log line, the metric and `/readyz` name TopicMismatch.
    @Test func aBroadcastAnsweredTopicMismatchHoldsOnlyTheAppsBroadcasts() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, topicMismatchBundleIDs: [DaemonHarness.bundleID])
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let connection = try database.connect()
            defer { connection.close() }
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [channel, Self.update])
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.rejected("TopicMismatch") >= 1 }, "\(daemon.text)")
            // The app's device pushes are not stopped by it.
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(7)])
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE device_token IS NOT NULL") == 0
            }, "\(daemon.text)")
            #expect(harness.mock.stats.accepted == 1)
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="TopicMismatch"} 1"#
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains(held) }, "\(daemon.metrics())")
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop broadcasts and channel requests (sandbox): TopicMismatch")
            }, "\(daemon.readyz())")
            #expect(daemon.readyz().hasPrefix("ready:"))
            // The broadcast waits, unspent; nothing is dead-lettered.
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs WHERE attempts = 0") == 1)
            #expect(harness.mock.stats.broadcastsAccepted[channel] == nil)
            // One error line naming the reason and what to check.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of broadcasts and channel requests for app shop in sandbox is held",
                             "\"reason\":\"TopicMismatch\"", "\"scope\":\"broadcast\"", "bundle_id", "letter case", "team"] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            #expect(!daemon.text.contains("sending for app shop is paused"), "\(daemon.text)")
        }
    }
}
