import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import Testing
@testable import pushd

/// APNs (here apns-mock) answering one notification on each new connection and refusing the
/// rest, connection after connection ("partial churn", an overloaded front end or a middlebox):
/// pushd counts each such connection as a failed one from the second in a row, so the log says
/// once that it backs off and why, `pushd_apns_reconnect_backoffs_total` counts the run, and
/// the mock sees connections at the backoff's pace, not hundreds a second. The real binary.
@Suite(.serialized) struct ConnectionChurnDaemonTests {
    @Test func partialChurnBacksOffWithOneLineSayingWhatHappened() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(refuseAfterStreams: 1))
            let connection = try database.connect()
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 20) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metricsPort = String(try #require(port))
            let churnStarted = Timestamp()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"churn"}}' FROM generate_series(1, 200) g
                """)
            var metrics = ""
            #expect(try DaemonHarness.wait(seconds: 20) {
                metrics = try SecretRedactionTests.http(metricsPort, "/metrics")
                return OutageVisibilityTests.counter(metrics, "pushd_apns_reconnect_backoffs_total") >= 1
            }, "\(metrics.split(separator: "\n").filter { $0.contains("backoffs") })")
            Thread.sleep(forTimeInterval: max(0, 12 - Timestamp().timeIntervalSince(churnStarted)))
            let seconds = Timestamp().timeIntervalSince(churnStarted)
            let stats = harness.mock.stats
            let readyz = (try? SecretRedactionTests.http(metricsPort, "/readyz")) ?? ""
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let announced = text.split(separator: "\n").filter { $0.contains("\"event\":\"apns_reconnect_backoff\"") }
            print("""
                partial churn for \(Int(seconds)) s: \(stats.connectionsAccepted) connections accepted, \(stats.accepted) notifications \
                accepted, \(stats.streamsReset) streams refused; /readyz: \(readyz.split(separator: "\n").first ?? ""); \
                \(announced.count) apns_reconnect_backoff line(s): \(announced.first ?? "")
                """)
            // One sending loop on the transactional lane: the first connection, the first churned
            // one (let go), then one per backoff (250 ms doubling to 4 s, each at least half its
            // delay): about 11 in 12 s, and a few to spare (the wait above may have made it longer).
            #expect(stats.connectionsAccepted <= OutageVisibilityTests.connectionsAllowedByBackoff(seconds: seconds) + 1 + 3,
                    "the mock accepted \(stats.connectionsAccepted) connections in \(seconds) s")
            #expect(announced.count == 1, "\(announced)")
            let line = announced.first ?? ""
            #expect(line.contains("then was lost") && line.contains("unanswered") && line.contains("a few answers"), "\(line)")
            #expect(!line.contains("certificate"), "a token app: no certificate to suspect")

            try harness.mock.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 60) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.stats.accepted >= 200)
            #expect(try DaemonHarness.wait(seconds: 15) {
                ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("apns_reconnect_backoff_ended")
            }, "the run's end is logged")
        }
    }
}
