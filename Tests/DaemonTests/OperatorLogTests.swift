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
                #expect((down.first?["error"] as? String)?.hasPrefix("no answer") == true)
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
