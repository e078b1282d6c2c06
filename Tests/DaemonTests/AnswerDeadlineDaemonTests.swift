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

    /// SIGTERM while APNs answers slowly: the drain deadline passes with a batch still waiting
    /// for answers. The engines are stopped (what they held is answered as not sent) and the
    /// workers record their batches before the process exits: the jobs APNs already accepted
    /// are not sent again by the next instance. Before, `pushd run` exited while the workers
    /// were recording, the batch's transaction aborted, and every job of it went out again.
    @Test func aSigtermWhileAnswersAreSlowSendsNoAcceptedJobAgain() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(randomDelayMilliseconds: 6000))
            let connection = try database.connect()
            let path = try harness.writeConfigFile()
            var yaml = try String(contentsOfFile: path, encoding: .utf8)
            #expect(yaml.contains("  drain_timeout_s: 5\n"))
            yaml = yaml.replacingOccurrences(of: "  drain_timeout_s: 5\n", with: "  drain_timeout_s: 1\n")
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            let jobs = 60
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', repeat(lpad(to_hex(5000 + g), 16, '0'), 4), '{"aps":{"alert":"slow"}}'
                FROM generate_series(1, $1::int) g
                """, [jobs])
            let first = try DaemonProcessTests.start(config: path, log: harness.directory + "/first.log")
            let someAccepted = DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted >= 5 }
            kill(first.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(first, seconds: 30))
            #expect(someAccepted)
            let acceptedBeforeExit = harness.mock.stats.accepted
            #expect(acceptedBeforeExit < jobs, "the batch should still be waiting for answers at SIGTERM")
            // What the first instance recorded as delivered is gone from the queue; what APNs
            // accepted beyond that, it never learnt of.
            let recorded = jobs - (try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs"))
            let unrecorded = acceptedBeforeExit - recorded
            print("SIGTERM with answers slow: \(acceptedBeforeExit) accepted before the first instance exited, \(recorded) recorded, \(unrecorded) not, \(harness.mock.stats.clientResets) client resets")

            try harness.mock.setFaults(.none)
            let second = try DaemonProcessTests.start(config: path, log: harness.directory + "/second.log")
            defer {
                kill(second.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(second, seconds: 10)
            }
            #expect(try DaemonHarness.wait(seconds: 60) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
            })
            Thread.sleep(forTimeInterval: 7)
            let perToken = harness.mock.stats.perToken
            let twice = perToken.filter { $0.value.accepted > 1 }
            #expect(perToken.count == jobs, "\(perToken.count) of \(jobs) jobs accepted")
            // An answer the mock wrote as the stopped engine closed its connection never reached
            // pushd: that job is unanswered, so it is sent again (at least once, as APNs may have
            // it). Only those may be accepted twice; and the batch APNs answered is recorded, so
            // they are a few, those of the moment the connection closed, not the batch (23 of 23
            // accepted before the first instance exited were unrecorded and sent again before the
            // fix). The stopped engines close their connections at once (0 unrecorded in runs on
            // a quiet machine); while they were left open until the process exited, the mock
            // answered on them as the workers recorded their batches (6 of 33 seen on a loaded
            // 2-core machine).
            #expect(twice.count <= unrecorded, "\(twice.count) jobs accepted twice, \(unrecorded) accepted and not recorded")
            #expect(unrecorded <= 5, "\(unrecorded) of \(acceptedBeforeExit) jobs accepted before the first instance exited were not recorded")
        }
    }
}
