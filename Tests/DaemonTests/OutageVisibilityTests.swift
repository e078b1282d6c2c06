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
        metrics.split(separator: "\n").first { $0.hasPrefix("pushd_apns_unavailable{app=\"shop\",environment=\"sandbox\",lane=\"transactional\"}") }
            .map { String($0.split(separator: " ").last ?? "") }
    }

    /// The most connections one sending loop opens in `seconds` of a storm: the first, then one
    /// per reconnect backoff (250 ms doubling to 4 s, each at least half its delay, so at least
    /// 0.125 + 0.25 + 0.5 + 1 s for the next four and 2 s for each after them).
    static func connectionsAllowedByBackoff(seconds: Double) -> Int {
        5 + Int(max(0, (seconds - 1.875) / 2).rounded(.up))
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
    /// The sum of a counter's series in a scrape.
    static func counter(_ metrics: String, _ name: String) -> Double {
        metrics.split(separator: "\n").filter { $0.hasPrefix(name + "{") }
            .compactMap { Double($0.split(separator: " ").last ?? "") }.reduce(0, +)
    }

    /// APNs accepts connections, reads each request and resets the connection without an
    /// answer, as a server going down does. The probes show the outage as for any other; the
    /// engine counts each such connection as a failed one, so the log says once that it backs
    /// off, `pushd_apns_reconnect_backoffs_total` counts the run, and the mock sees a few
    /// connections, not hundreds a second.
    @Test func aResetStormShowsOnTheProbesAndBacksOffThenClears() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(resetRate: 1))
            let connection = try database.connect()
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 20) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metricsPort = String(try #require(port))
            let stormStarted = Timestamp()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"reset"}}' FROM generate_series(1, 20) g
                """)

            var metrics = ""
            #expect(try DaemonHarness.wait(seconds: 20) {
                metrics = try SecretRedactionTests.http(metricsPort, "/metrics")
                return Self.unavailable(metrics) == "1" && Self.counter(metrics, "pushd_apns_reconnect_backoffs_total") >= 1
            }, "\(metrics.split(separator: "\n").filter { $0.contains("unavailable") || $0.contains("backoffs") })")
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
            // Some seconds of the storm: the connections stay within what the backoff allows.
            Thread.sleep(forTimeInterval: max(0, 12 - Timestamp().timeIntervalSince(stormStarted)))
            let seconds = Timestamp().timeIntervalSince(stormStarted)
            let accepted = harness.mock.stats.connectionsAccepted
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let announced = text.split(separator: "\n").filter { $0.contains("\"event\":\"apns_reconnect_backoff\"") }
            print("reset storm of \(Int(seconds)) s: \(accepted) connections accepted, \(announced.count) apns_reconnect_backoff line(s): \(announced.first ?? "")")
            // One sending loop on the transactional lane: the first connection, then one per backoff
            // (250 ms doubling to 4 s, each at least half its delay): about 10 in 12 s, and a few to
            // spare; the waits above may have made the storm longer than 12 s.
            #expect(accepted <= Self.connectionsAllowedByBackoff(seconds: seconds) + 3, "the mock accepted \(accepted) connections in \(seconds) s")
            #expect(announced.count == 1, "\(announced)")
            #expect(announced.first?.contains("ended before answering anything") == true, "\(announced)")
            // A token app: no certificate to suspect.
            #expect(announced.first?.contains("certificate") == false, "\(announced)")

            try harness.mock.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.wait(seconds: 15) {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(1000 + g), 64, '0'), '{"aps":{"alert":"back"}}' FROM generate_series(1, 5) g
                    """)
                metrics = try SecretRedactionTests.http(metricsPort, "/metrics")
                return Self.unavailable(metrics) == "0"
            }, "\(metrics.split(separator: "\n").filter { $0.contains("unavailable") })")
            #expect(try DaemonHarness.wait(seconds: 15) {
                try SecretRedactionTests.http(metricsPort, "/readyz").contains("200")
            })
            #expect(try DaemonHarness.wait(seconds: 15) {
                ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("apns_reconnect_backoff_ended")
            }, "the run's end is logged")
        }
    }
}
