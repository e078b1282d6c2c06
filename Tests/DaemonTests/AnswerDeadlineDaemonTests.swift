import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs unreachable for longer than a transactional worker used to wait for an answer: the
/// real `pushd run` with its engine's answer deadline accepts each job exactly once when APNs
/// is back. Before, the worker gave up on requests the engine still held (waiting out its
/// reconnect back-off), queued the jobs again, and the engine later sent both copies.
@Suite(.serialized) struct AnswerDeadlineDaemonTests {
    /// The harness's configuration file with a 1 s request timeout: the answer deadline is then
    /// 2 × 1 s + 10 s = 12 s, the old give-up was the same 12 s, and the engine's reconnect
    /// back-off grows past it within the outage.
    static func configFile(_ harness: DaemonHarness) throws -> String {
        let path = try harness.writeConfigFile()
        var yaml = try String(contentsOfFile: path, encoding: .utf8)
        #expect(yaml.contains("  threads: 1\n"))
        yaml = yaml.replacingOccurrences(of: "  threads: 1\n", with: "  threads: 1\n  request_timeout_ms: 1000\n")
        yaml = yaml.replacingOccurrences(of: "retry:\n  base_delay_ms: 10\n  max_delay_ms: 200\n",
                                         with: "retry:\n  base_delay_ms: 100\n  max_delay_ms: 1000\n")
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func transactionalJobsDuringAnOutageLongerThanTheOldGiveUpAreEachAcceptedOnce() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try Self.configFile(harness)
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            func insert(_ first: Int, _ count: Int) throws {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex($1::int + g), 16, '0') || repeat(lpad(to_hex($1::int + g), 16, '0'), 3),
                           '{"aps":{"alert":"outage"}}'
                    FROM generate_series(0, $2::int - 1) g
                    """, [first, count])
            }
            // Connected and sending before the outage.
            try insert(1, 1)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1 })

            harness.mock.stop()
            let outage = 45.0
            let stopped = Timestamp()
            var jobs = 0
            while Timestamp().timeIntervalSince(stopped) < outage {
                try insert(1000 + jobs, 4)
                jobs += 4
                Thread.sleep(forTimeInterval: 0.5)
            }
            try harness.restartMock()

            let drained = try DaemonHarness.wait(seconds: 120) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
            }
            #expect(drained)
            // Answers still on their way from copies the engine held would land now.
            Thread.sleep(forTimeInterval: 3)
            let perToken = harness.mock.stats.perToken
            let twice = perToken.filter { $0.value.accepted > 1 }
            print("outage of \(Int(outage)) s with \(jobs) jobs inserted: \(perToken.count) tokens accepted, \(twice.count) of them more than once")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(perToken.count == jobs, "\(perToken.count) of \(jobs) jobs accepted")
            #expect(twice.isEmpty, "\(twice.count) jobs accepted more than once, e.g. \(twice.first.map { "\($0.key): \($0.value.accepted)" } ?? "")")
        }
    }
}
