import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import Testing
@testable import pushd

/// While APNs takes none of an app's notifications, probes show it: the
/// `pushd_apns_unavailable` gauge, `/readyz` and `pushd status` name the app; once APNs
/// answers again, all three clear.
@Suite(.serialized) struct OutageVisibilityTests {
    static func unavailable(_ metrics: String) -> String? {
        metrics.split(separator: "\n").first { $0.hasPrefix("pushd_apns_unavailable{app=\"shop\",lane=\"transactional\"}") }
            .map { String($0.split(separator: " ").last ?? "") }
    }

    @Test func anOutageShowsInTheGaugeReadyzAndStatusUntilApnsAnswersAgain() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(internalServerErrorRate: 1))
            let connection = try database.connect()
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 20) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metricsPort = String(try #require(port))
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"outage"}}' FROM generate_series(1, 20) g
                """)

            var metrics = ""
            #expect(try DaemonHarness.wait(seconds: 20) {
                metrics = try SecretRedactionTests.http(metricsPort, "/metrics")
                return Self.unavailable(metrics) == "1"
            }, "\(metrics.split(separator: "\n").filter { $0.contains("unavailable") })")
            var readyz = ""
            #expect(try DaemonHarness.wait(seconds: 15) {
                readyz = try SecretRedactionTests.http(metricsPort, "/readyz")
                return readyz.contains("503") && readyz.contains("shop")
            }, "\(readyz)")
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.exitCode == 1 && status.problems.contains { $0.contains("APNs") && $0.contains("shop") }
            }, "\(status.text)")

            try harness.mock.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            // Answers must keep coming for a second before the lane counts as back.
            #expect(try DaemonHarness.wait(seconds: 15) {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(1000 + g), 64, '0'), '{"aps":{"alert":"back"}}' FROM generate_series(1, 5) g
                    """)
                metrics = try SecretRedactionTests.http(metricsPort, "/metrics")
                return Self.unavailable(metrics) == "0"
            }, "\(metrics.split(separator: "\n").filter { $0.contains("unavailable") })")
            #expect(try DaemonHarness.wait(seconds: 15) {
                readyz = try SecretRedactionTests.http(metricsPort, "/readyz")
                return readyz.contains("200")
            }, "\(readyz)")
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return !status.problems.contains { $0.contains("APNs") }
            }, "\(status.text)")
        }
    }
}
