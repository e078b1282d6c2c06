import APNsMock
import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The broadcast worker sets up its own connections (one for broadcasts, one for channel
/// requests) the first time it needs them. A setup that fails (here the CA file
/// `apns.ca_file` names is missing for a moment, as during a non-atomic rotation) says nothing
/// of the app's credentials: the broadcast and the channel request wait 10 s unspent, as a
/// transactional job does, and the app's other lanes go on. Before, the failure was taken for
/// a certificate APNs refused and paused every lane of the app for five minutes. The
/// transactional lane, whose connections to the other environment fail the same way, logs the
/// failure once per batch, not once per job.
@Suite(.serialized) struct BroadcastConnectionSetupTests {
    /// The harness's configuration with `apns.ca_file` a copy of its CA file, which a test
    /// removes and puts back; and the copy's path.
    static func configWithCACopy(_ harness: DaemonHarness) throws -> (PushdConfig, String) {
        let caCopy = harness.directory + "/ca-copy.pem"
        try FileManager.default.copyItem(atPath: harness.certificates.caCertificate, toPath: caCopy)
        var config = harness.config()
        config.apns.caFile = caCopy
        return (config, caCopy)
    }

    @Test func aFailedConnectionSetupForBroadcastsRetriesThemAndPausesNothing() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let (config, caCopy) = try Self.configWithCACopy(harness)
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(config, log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            func enqueueJob(_ n: Int) throws {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                     [String(repeating: "0", count: 60) + String(format: "%04x", n)])
            }
            // The transactional lane connects while the file is there.
            try enqueueJob(1)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 1 })

            try FileManager.default.removeItem(atPath: caCopy)
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)",
                                 [channel, BroadcastDaemonTests.update])
            let request = try connection.query("SELECT pushd.create_channel('shop')").require(Int64.self, row: 0, column: 0)
            var broadcastError = ""
            #expect(try DaemonHarness.wait(seconds: 20) {
                broadcastError = try connection.query("SELECT coalesce(max(last_error), '') FROM pushd.broadcast_jobs")
                    .require(String.self, row: 0, column: 0)
                return broadcastError.hasPrefix("cannot connect: ")
            }, "\(broadcastError)")
            #expect(broadcastError.contains("ca-copy.pem"), "\(broadcastError)")
            var outcome = ""
            #expect(try DaemonHarness.wait(seconds: 20) {
                outcome = try connection.query("SELECT coalesce(outcome, '') FROM pushd.channels WHERE id = $1", [request])
                    .require(String.self, row: 0, column: 0)
                return outcome.hasPrefix("cannot connect: ")
            }, "\(outcome)")
            // Jobs to the environment no connection was set up for yet wait the same way.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, environment)
                SELECT 'shop', lpad(to_hex(700000 + g), 64, '0'), '{"aps":{"alert":"hi"}}', 'production' FROM generate_series(1, 20) g
                """)
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE last_error LIKE 'cannot connect: %ca-copy.pem%' AND attempts = 0") == 20
            })
            let lines = log.lines.filter { $0.contains("cannot set up sending for app shop to production") }
            #expect(!lines.isEmpty && lines.count < 5, "\(lines.count) lines for 20 jobs: \(lines)")
            // A campaign's chunk stops at its first target there, parked for 10 s with the reason,
            // and the campaign is not leased again before: it came back at every turn. Its
            // targets are registered tokens, each with its environment (production, all of
            // them): a chunk goes on past such a target only for targets of the other one.
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment)
                SELECT 'shop', lpad(to_hex(500000 + g), 64, '0'), 'production' FROM generate_series(1, 200) g
                """)
            let store = CampaignStore()
            let campaign = try store.create(connection, NewCampaign(app: "shop", name: "sale", payload: #"{"aps":{"alert":"sale"}}"#))
            #expect(try store.importFromDeviceTokens(connection, campaignID: campaign).imported == 200)
            #expect(try store.start(connection, id: campaign) == .running)
            func campaignLaneLines() -> Int {
                log.lines.count { $0.contains("cannot set up sending for app shop to production") && $0.contains(#""lane":"campaign""#) }
            }
            let before = campaignLaneLines()
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries WHERE last_error LIKE 'cannot connect: %ca-copy.pem%'") > 0
            })
            Thread.sleep(forTimeInterval: 3)
            let campaignLines = campaignLaneLines() - before
            #expect(campaignLines <= 2, "\(campaignLines) lines in 3 s for one campaign")
            let parked = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries")
            #expect(parked <= 2, "\(parked) of the campaign's targets were set aside at once")
            // Unspent: the setup failure is no attempt of theirs.
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs WHERE attempts = 0") == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)

            // Nothing is paused: the transactional lane, connected, sends on.
            try enqueueJob(2)
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.accepted == 2 },
                    "a transactional job waited while the broadcast lane could not connect")
            // What `/readyz` and `pushd status` name.
            let named = pipeline.context.connectionSetupFailures()["shop"] ?? ""
            for lane in ["transactional lane cannot connect to production", "campaign lane cannot connect to production",
                         "broadcast lane cannot connect to sandbox", "channels lane cannot connect to sandbox"] {
                #expect(named.contains(lane), "\(named)")
            }
            let scrape = pipeline.context.metrics.registry.expositionText()
            #expect(scrape.contains("pushd_app_paused{app=\"shop\"} 0"), "\(scrape)")
            #expect(scrape.contains("pushd_retries_total{app=\"shop\",lane=\"broadcast\",reason=\"connection_setup\"}"), "\(scrape)")
            #expect(scrape.contains("pushd_retries_total{app=\"shop\",lane=\"transactional\",reason=\"connection_setup\"}"), "\(scrape)")
            #expect(scrape.contains("pushd_retries_total{app=\"shop\",lane=\"campaign\",reason=\"connection_setup\"}"), "\(scrape)")
            #expect(scrape.split(separator: "\n").contains { $0.hasPrefix("pushd_channel_operations_total{") && $0.contains("reason=\"connection_setup\"") },
                    "\(scrape)")


            // Once the file is back, both go with the next try (10 s after the failed one).
            try FileManager.default.copyItem(atPath: harness.certificates.caCertificate, toPath: caCopy)
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.broadcastsAccepted[channel] == 1 })
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted == 222 })
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: campaign)?.status == .done })
            #expect(try store.campaign(connection, id: campaign)?.sent == 200)
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE id = \(request) AND state = 'active'") == 1
            })
        }
    }

    /// The real `pushd run`: while a lane cannot set up its connections, `/readyz` is not ready
    /// and names the app, the lane and the error, and `pushd status` lists it; once it
    /// connects again, the process is ready again.
    @Test func aLaneThatCannotConnectMakesTheProcessNotReadyUntilItConnects() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let caCopy = harness.directory + "/ca-copy.pem"
            try FileManager.default.copyItem(atPath: harness.certificates.caCertificate, toPath: caCopy)
            let config = try harness.writeConfigFile()
            let yaml = try String(contentsOfFile: config, encoding: .utf8)
                .replacingOccurrences(of: "ca_file: \(harness.certificates.caCertificate)", with: "ca_file: \(caCopy)")
            try yaml.write(toFile: config, atomically: true, encoding: .utf8)
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let connection = try database.connect()
            defer { connection.close() }
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().hasPrefix("ready") }, "\(daemon.text.suffix(3000))")

            try FileManager.default.removeItem(atPath: caCopy)
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)",
                                 [channel, BroadcastDaemonTests.update])
            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 30) {
                readyz = daemon.readyz()
                return readyz.contains("cannot connect to APNs for app shop")
            }, "\(readyz)\n\(daemon.text.suffix(3000))")
            #expect(readyz.hasPrefix("not ready"), "\(readyz)")
            #expect(readyz.contains("broadcast lane cannot connect to sandbox") && readyz.contains("ca-copy.pem"), "\(readyz)")
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 20) {
                status = try FleetStatusTests.status(database)
                // This host's failure, not said to be APNs's.
                return status.problems.contains {
                    $0.hasPrefix("app shop cannot connect to APNs on ") && $0.contains("broadcast lane cannot connect to sandbox")
                }
            }, "\(status.text)")
            #expect(daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 0"))

            try FileManager.default.copyItem(atPath: harness.certificates.caCertificate, toPath: caCopy)
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.broadcastsAccepted[channel] == 1 }, "\(daemon.text.suffix(3000))")
            // Reported for 30 s after the last failure, then ready again.
            #expect(DaemonHarness.wait(seconds: 60) { daemon.readyz().hasPrefix("ready") }, "\(daemon.readyz())")
        }
    }
}

extension BroadcastConnectionSetupTests {
    /// A capped campaign's chunk stopped by a connection that could not be set up gives back
    /// the time its lease reserved at the cap before its 10 s deferral is written: the campaign
    /// is leased again 10 s later, not after its chunk's time (100 s: 1,000 targets at 10/s).
    @Test func aCappedCampaignStoppedByAFailedConnectionSetupIsLeasedAgainAfterTenSeconds() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let (config, caCopy) = try Self.configWithCACopy(harness)
            let pipeline = try harness.pipeline(config, log: MemoryLogSink())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }

            // Registered tokens of production, which no lane has connected to yet.
            try FileManager.default.removeItem(atPath: caCopy)
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment)
                SELECT 'shop', lpad(to_hex(500000 + g), 64, '0'), 'production' FROM generate_series(1, 1000) g
                """)
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "sale", payload: #"{"aps":{"alert":"sale"}}"#, rateLimit: 10))
            #expect(try store.importFromDeviceTokens(connection, campaignID: id).imported == 1000)
            #expect(try store.start(connection, id: id) == .running)
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries WHERE last_error LIKE 'cannot connect: %ca-copy.pem%'") > 0
            })
            #expect(try DaemonHarness.wait(seconds: 5) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_chunks WHERE lease_until > now()") == 0
            }, "the chunk was not released")
            let waiting = try #require(try connection.query("""
                SELECT extract(epoch FROM next_lease_at - now())::float8 FROM pushd.campaigns WHERE id = $1
                """, [id]).get(Double.self, row: 0, column: 0))
            // Put off for the 10 s (less the moments since), not for the chunk's time at the cap.
            #expect(waiting > 3 && waiting <= CampaignWorker.setupRetrySeconds + 0.5,
                    "the campaign's next lease waits \(waiting) s after a setup failure put it off for \(CampaignWorker.setupRetrySeconds) s")

            try FileManager.default.copyItem(atPath: harness.certificates.caCertificate, toPath: caCopy)
            #expect(DaemonHarness.wait(seconds: 25) { harness.mock.stats.accepted >= 5 },
                    "\(harness.mock.stats.accepted) accepted in 25 s after the CA file came back")
        }
    }

    /// A CA file that went bad while pushd runs (rewritten as something that holds no
    /// certificate) is read when a lane sets up its connections: the lane's work waits 10 s,
    /// unspent, naming the file, and goes once it is fixed. libcurl alone reads it only when a
    /// connection opens, and that TLS failure (libcurl error 77) paused every lane of the app
    /// for 5 minutes as a refused server certificate.
    @Test func aCAFileThatWentBadIsASetupFailureNotAPause() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let (config, caCopy) = try Self.configWithCACopy(harness)
            let pipeline = try harness.pipeline(config, log: MemoryLogSink())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [String(repeating: "0", count: 63) + "1"])
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 1 })

            try "not a certificate\n".write(toFile: caCopy, atomically: true, encoding: .utf8)
            // Production: no lane has connected there yet.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, environment)
                SELECT 'shop', lpad(to_hex(700000 + g), 64, '0'), '{"aps":{"alert":"hi"}}', 'production' FROM generate_series(1, 20) g
                """)
            var errors = [String]()
            #expect(try DaemonHarness.wait(seconds: 20) {
                errors = try connection.query("SELECT DISTINCT coalesce(last_error, '') FROM pushd.jobs").rows.map { try $0.require(0) as String }
                return errors.count == 1 && errors[0].hasPrefix("cannot connect: ")
            }, "\(errors)")
            #expect(errors.first?.contains("ca-copy.pem holds no PEM certificate") == true, "\(errors)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE attempts = 0") == 20)
            let scrape = pipeline.context.metrics.registry.expositionText()
            #expect(scrape.contains("pushd_app_paused{app=\"shop\"} 0"), "the app was paused")
            #expect(pipeline.context.serverCertificateRefusals().isEmpty)
            let named = pipeline.context.connectionSetupFailures()["shop"] ?? ""
            #expect(named.contains("transactional lane cannot connect to production") && named.contains("ca-copy.pem"), "\(named)")

            try FileManager.default.removeItem(atPath: caCopy)
            try FileManager.default.copyItem(atPath: harness.certificates.caCertificate, toPath: caCopy)
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted == 21 }, "\(harness.mock.stats.accepted) accepted")
        }
    }
}
