import APNsMock
import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Apple's sandbox and production hosts are separate services that fail apart. With the real
/// `pushd run` sending one app to both, the sandbox host answering 503 to everything while
/// production takes everything: the sandbox outage is reported as sandbox's
/// (`pushd_apns_unavailable{environment="sandbox"}`, `/readyz`, `pushd status`), production is
/// not reported down, its notifications go out at once, and production's answers neither end
/// the sandbox outage nor make it come and go.
@Suite(.serialized) struct EnvironmentOutageTests {
    /// Every `pushd_apns_unavailable` series of app shop's transactional lane in a scrape, by its labels.
    static func unavailable(_ metrics: String) -> [String: String] {
        var series = [String: String]()
        for line in metrics.split(separator: "\n") where line.hasPrefix("pushd_apns_unavailable{app=\"shop\"") && line.contains("lane=\"transactional\"") {
            let parts = line.split(separator: " ")
            series[String(parts[0].dropFirst("pushd_apns_unavailable".count))] = String(parts.last ?? "")
        }
        return series
    }

    static let sandboxSeries = #"{app="shop",environment="sandbox",lane="transactional"}"#
    static let productionSeries = #"{app="shop",environment="production",lane="transactional"}"#

    /// The outage lines of the log (`apns_down`, `apns_back`) of one environment ("" for all).
    static func outageLines(_ log: String, _ event: String, environment: String = "") -> [Substring] {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter {
            $0.contains("\"event\":\"\(event)\"") && (environment.isEmpty || $0.contains("\"environment\":\"\(environment)\""))
        }
    }

    /// Production sending before and throughout: its answers do not hide the sandbox outage.
    @Test func productionAnswersDoNotHideASandboxOutage() throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database, sandboxFaults: FaultConfiguration(serviceUnavailableRate: 1))
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            let log = hosts.harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try hosts.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 20) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metricsPort = String(try #require(port))
            var samples = [String: [String]]()
            let started = Timestamp()
            var inserted = 0
            // Production ten a second for 8 s (and on, up to 20 s, until the sandbox outage
            // shows); ten sandbox notifications after 2 s, by the clock: a slow pass of this
            // loop must not put them off past the end.
            var sandboxInserted = false
            while Timestamp().timeIntervalSince(started) < 8
                    || (Timestamp().timeIntervalSince(started) < 20 && samples[Self.sandboxSeries]?.last != "1") {
                inserted += 1
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, environment)
                    VALUES ('shop', lpad(to_hex(100000 + $1::int), 64, '0'), '{"aps":{"alert":"production"}}', 'production')
                    """, [inserted])
                if !sandboxInserted && Timestamp().timeIntervalSince(started) >= 2 {
                    sandboxInserted = true
                    try connection.query("""
                        INSERT INTO pushd.jobs (app, device_token, payload, environment)
                        SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"sandbox"}}', 'sandbox' FROM generate_series(1, 10) g
                        """)
                }
                for (labels, value) in Self.unavailable(try SecretRedactionTests.http(metricsPort, "/metrics")) where samples[labels]?.last != value {
                    samples[labels, default: []].append(value)
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
            print("production 200 throughout, sandbox 503 from 2 s: pushd_apns_unavailable values seen: \(samples); "
                  + "apns_down lines: \(Self.outageLines(log, "apns_down").count)")
            #expect(samples[Self.sandboxSeries] == ["0", "1"], "\(samples)")
            #expect(samples[Self.productionSeries] == ["0"], "\(samples)")
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'production'") == 0
            })
            #expect(hosts.production.acceptedLog.count == inserted)
        }
    }

    @Test func aSandboxOutageIsSandboxsAloneWhileProductionSends() throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database, sandboxFaults: FaultConfiguration(serviceUnavailableRate: 1))
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            let log = hosts.harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try hosts.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 20) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metricsPort = String(try #require(port))

            // Sandbox first, alone: ten notifications that the sandbox host answers 503.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, environment)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"sandbox"}}', 'sandbox' FROM generate_series(1, 10) g
                """)
            var samples = [String: [String]]()
            func sample() throws {
                for (labels, value) in Self.unavailable(try SecretRedactionTests.http(metricsPort, "/metrics")) {
                    if samples[labels]?.last != value { samples[labels, default: []].append(value) }
                }
            }
            let started = Timestamp()
            // At least 4 s, and until the outage shows (a TLS connect, three 503s and a second of
            // failures: a slow first send on a loaded machine takes longer than 4 s).
            while Timestamp().timeIntervalSince(started) < 4
                    || (samples[Self.sandboxSeries]?.last != "1" && Timestamp().timeIntervalSince(started) < 20) {
                try sample()
                Thread.sleep(forTimeInterval: 0.2)
            }
            let beforeProduction = samples

            // Then production notifications, ten a second for 10 s, while sandbox still answers 503.
            var inserted = 0
            var oldestWaiting = 0.0
            var productionErrors = 0
            let productionStarted = Timestamp()
            while Timestamp().timeIntervalSince(productionStarted) < 10 {
                inserted += 1
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, environment)
                    VALUES ('shop', lpad(to_hex(100000 + $1::int), 64, '0'), '{"aps":{"alert":"production"}}', 'production')
                    """, [inserted])
                try sample()
                let waiting = try connection.query("""
                    SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8, count(*) FILTER (WHERE last_error IS NOT NULL)
                    FROM pushd.jobs WHERE environment = 'production'
                    """)
                oldestWaiting = max(oldestWaiting, try waiting.require(Double.self, row: 0, column: 0))
                productionErrors = max(productionErrors, try waiting.require(Int.self, row: 0, column: 1))
                Thread.sleep(forTimeInterval: 0.1)
            }
            var readyz = ""
            #expect(try DaemonHarness.wait(seconds: 15) {
                readyz = try SecretRedactionTests.http(metricsPort, "/readyz")
                return readyz.contains("503")
            }, "\(readyz)")
            let metrics = try SecretRedactionTests.http(metricsPort, "/metrics")
            let probes = metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_apns_outage_probes_total{") && $0.contains("transactional") }
            print("sandbox 503, production 200: pushd_apns_unavailable values seen, 4 s of sandbox alone: \(beforeProduction); "
                  + "then 10 s of production at 10/s: \(samples); apns_down lines: \(Self.outageLines(log, "apns_down").count), "
                  + "apns_back lines: \(Self.outageLines(log, "apns_back").count); oldest production job waiting: "
                  + "\(String(format: "%.2f", oldestWaiting)) s, production jobs retried: \(productionErrors); probes: \(probes); "
                  + "readyz: \(readyz.split(separator: "\n").last ?? "")")

            // Production sends at once and is never reported down.
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'production'") == 0
            })
            #expect(hosts.production.acceptedLog.count == inserted)
            #expect(productionErrors == 0)
            #expect(samples[Self.productionSeries] == ["0"], "\(samples)")
            #expect(Self.outageLines(log, "apns_down", environment: "production").isEmpty)
            #expect(!metrics.contains(#"pushd_apns_outage_probes_total{environment="production",lane="transactional"} "#)
                    || metrics.contains(#"pushd_apns_outage_probes_total{environment="production",lane="transactional"} 0"#), "\(probes)")
            // Sandbox is down from its first second of failures to the end, once: production's
            // answers neither end it nor make it come and go.
            #expect(beforeProduction[Self.sandboxSeries] == ["0", "1"] || beforeProduction[Self.sandboxSeries] == ["1"], "\(beforeProduction)")
            #expect(samples[Self.sandboxSeries]?.last == "1", "\(samples)")
            #expect(samples[Self.sandboxSeries]?.filter { $0 == "1" }.count == 1, "\(samples)")
            #expect(Self.outageLines(log, "apns_down", environment: "sandbox").count == 1)
            #expect(Self.outageLines(log, "apns_back").isEmpty)
            #expect(readyz.contains("shop") && readyz.contains("in sandbox") && !readyz.contains("in production"), "\(readyz)")
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.exitCode == 1 && status.problems.contains { $0.contains("APNs") && $0.contains("shop") && $0.contains("in sandbox") }
            }, "\(status.text)")
            #expect(!status.problems.contains { $0.contains("in production") }, "\(status.text)")

            // Sandbox answers again: its notifications go out and its outage ends, with one line.
            try hosts.sandbox.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.wait(seconds: 15) {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, environment)
                    SELECT 'shop', lpad(to_hex(200000 + g), 64, '0'), '{"aps":{"alert":"back"}}', 'sandbox' FROM generate_series(1, 5) g
                    """)
                return Self.unavailable(try SecretRedactionTests.http(metricsPort, "/metrics"))[Self.sandboxSeries] == "0"
            })
            // The line follows the gauge.
            #expect(DaemonHarness.wait(seconds: 5) { Self.outageLines(log, "apns_back", environment: "sandbox").count == 1 })
            #expect(try DaemonHarness.wait(seconds: 15) { try SecretRedactionTests.http(metricsPort, "/readyz").contains("200") })
        }
    }
}
