import APNs
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// What the real `pushd run` tells an operator through an APNs outage: one JSON line per
/// change of state, a summary per interval, campaign milestones with their counts.
@Suite(.serialized) struct OperatorLogTests {
    static func events(in log: String) throws -> [[String: Any]] {
        try log.split(separator: "\n").map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
            return try #require(object as? [String: Any], "not a JSON object: \(line)")
        }
    }

    @Test func anOutageIsLoggedOnceWhenItStartsAndOnceWhenItEndsWithSummariesAndCampaignMilestones() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            var config = try APNsStormTests.configFile(harness, baseMilliseconds: 100, maxMilliseconds: 1000)
            // A key file others may read draws a configuration warning; a summary every 2 s.
            chmod(harness.keyFile, 0o644)
            var yaml = try String(contentsOfFile: config, encoding: .utf8)
            yaml = yaml.replacingOccurrences(of: "  level: info\n", with: "  level: info\n  summary_interval_s: 2\n")
            config = harness.directory + "/pushd-log.yml"
            try yaml.write(toFile: config, atomically: true, encoding: .utf8)

            harness.mock.stop()
            let logPath = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: logPath)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            let id = try CampaignLaneTests.campaign(connection, count: 1500)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(800000 + g), 16, '0') || repeat(lpad(to_hex(800000 + g), 16, '0'), 3), '{"aps":{"alert":"hi"}}'
                FROM generate_series(1, 50) g
                """)
            Thread.sleep(forTimeInterval: 5)
            try harness.restartMock()
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(try DaemonHarness.wait(seconds: 15) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 3)
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 10))

            let log = try String(contentsOfFile: logPath, encoding: .utf8)
            let events = try Self.events(in: log)
            func named(_ event: String) -> [[String: Any]] { events.filter { $0["event"] as? String == event } }
            // One line when each lane lost APNs, one when it came back; not one per notification.
            for lane in ["transactional", "campaign"] {
                let down = named("apns_down").filter { $0["lane"] as? String == lane }
                let back = named("apns_back").filter { $0["lane"] as? String == lane }
                #expect(down.count == 1 && back.count == 1, "\(lane): \(down.count) down, \(back.count) back lines")
                let error = down.first?["error"] as? String ?? ""
                // Either the request's own failed connect ("no answer …") or the requests the engine
                // handed back after failed connections ("not sent: 3 connections … failed in a
                // row"): both name libcurl's reason, with the host and port.
                #expect(error.hasPrefix("no answer") || error.hasPrefix("not sent: "), "\(lane): \(error)")
                #expect(error.contains("connect to 127.0.0.1 port \(harness.mockPort)"), "\(lane): \(error)")
                #expect(down.first?["app"] as? String == "shop")
            }
            let summaries = named("summary")
            #expect(summaries.contains { ($0["connection_errors"] as? Int ?? 0) > 0 && ($0["retries"] as? Int ?? 0) > 0 })
            #expect(named("campaign_started").count == 1)
            let finished = named("campaign_finished")
            #expect(finished.count == 1)
            #expect(finished.first?["sent"] as? Int == 1500 && finished.first?["failed"] as? Int == 0)
            #expect(named("config_warning").contains { ($0["setting"] as? String)?.hasSuffix("key_file") == true }, "\(named("config_warning"))")
            // Thousands of sends failed; the log stays readable.
            #expect(events.count < 60, "\(events.count) lines:\n\(log)")
        }
    }
}

/// What the log says when one instance dies mid-campaign and another takes its chunks over,
/// and the per-connection detail `debug` adds.
@Suite(.serialized) struct OperatorLogTakeoverTests {
    @Test func aChunkLeftByAKilledInstanceIsLoggedAsTakenOverNamingTheDeadWorker() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            // Paced so a chunk is always being sent when the first instance dies.
            let id = try CampaignLaneTests.campaign(connection, count: 10_000, rate: 2000)
            let config = try harness.writeConfigFile()
            let first = try DaemonProcessTests.start(config: config, log: harness.directory + "/first.log")
            defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 2000 })
            let leasedSQL = "SELECT lease_owner FROM pushd.campaign_chunks WHERE finished_at IS NULL AND lease_until > now() AND lease_owner IS NOT NULL"
            #expect(try DaemonHarness.wait(seconds: 10) { try connection.query(leasedSQL).rowCount > 0 })
            let leased = try connection.query(leasedSQL)
            let owners = Set(try (0..<leased.rowCount).map { try leased.require(String.self, row: $0, column: 0) })
            kill(first.processIdentifier, SIGKILL)
            #expect(DaemonProcessTests.waitForExit(first, seconds: 5))

            let logPath = harness.directory + "/second.log"
            let second = try DaemonProcessTests.start(config: config, log: logPath)
            defer { if second.isRunning { kill(second.processIdentifier, SIGKILL) } }
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 10) { port = PrometheusScrapeTests.metricsPort(log: logPath); return port != nil })
            let metrics = try SecretRedactionTests.http(String(try #require(port)), "/metrics")
            kill(second.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(second, seconds: 10))

            let log = try String(contentsOfFile: logPath, encoding: .utf8)
            let takenOver = try OperatorLogTests.events(in: log).filter { $0["event"] as? String == "chunk_taken_over" }
            #expect(!takenOver.isEmpty, "no chunk_taken_over line:\n\(log)")
            // Each line is counted with the lane's other takeovers.
            #expect(metrics.contains("pushd_lease_takeovers_total{app=\"shop\",lane=\"campaign\"} \(takenOver.count)\n"),
                    "\(metrics.split(separator: "\n").filter { $0.contains("lease_takeovers") })")
            // A worker is named `instance/campaign-N`. The workers leasing at the moment looked
            // are not all that die with the instance: another of its workers may lease a chunk
            // between the look and the kill (a capped campaign's chunks go to every worker).
            func instance(_ owner: String) -> String { String(owner[..<(owner.lastIndex(of: "/") ?? owner.endIndex)]) }
            let killed = Set(owners.map(instance))
            for line in takenOver {
                let previous = line["previous_owner"] as? String
                #expect(previous.map { killed.contains(instance($0)) } == true,
                        "\(previous ?? "nil") is not a worker of the killed instance \(killed)")
                #expect(line["level"] as? String == "warning")
                #expect(line["campaign"] as? Int == Int(id))
            }
            // The lease ran out on the dead instance's chunks only: each is named once.
            let chunks = takenOver.compactMap { $0["chunk"] as? Int }
            #expect(chunks.count == takenOver.count && Set(chunks).count == chunks.count, "\(takenOver)")
        }
    }

    @Test func debugLogsEachConnectionOpenedWithItsAppEnvironmentAndLane() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try harness.writeConfigFile()
            let yaml = try String(contentsOfFile: config, encoding: .utf8)
            try yaml.replacingOccurrences(of: "  level: info\n", with: "  level: debug\n")
                .write(toFile: config, atomically: true, encoding: .utf8)
            let logPath = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: logPath)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{\"aps\":{}}' FROM generate_series(1, 5)",
                                 [DaemonHarness.token(4242)])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 10))

            let log = try String(contentsOfFile: logPath, encoding: .utf8)
            let opened = try OperatorLogTests.events(in: log).filter { $0["event"] as? String == "connection_opened" }
            #expect(opened.contains { $0["app"] as? String == "shop" && $0["environment"] as? String == "sandbox"
                                      && $0["lane"] as? String == "transactional" && $0["level"] as? String == "debug" },
                    "no connection_opened line for the transactional lane:\n\(log)")
        }
    }
}
