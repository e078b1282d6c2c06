import APNsMock
import Posix
import Foundation
import Glibc
import Metrics
import PushdTestSupport
import Testing
@testable import pushd

/// TooManyProviderTokenUpdates, ExpiredProviderToken, 503 Shutdown and GOAWAY: counted every
/// time, logged once a minute per kind.
@Suite(.serialized) struct ConnectionRetirementReporterTests {
    @Test func theFourCausesAreRecognisedAndNothingElse() {
        #expect(ConnectionRetirementReporter.cause(status: 429, reason: "TooManyProviderTokenUpdates") == .tooManyProviderTokenUpdates)
        #expect(ConnectionRetirementReporter.cause(status: 403, reason: "ExpiredProviderToken") == .expiredProviderToken)
        #expect(ConnectionRetirementReporter.cause(status: 503, reason: "Shutdown") == .shutdown)
        #expect(ConnectionRetirementReporter.cause(status: 429, reason: "TooManyRequests") == nil)
        #expect(ConnectionRetirementReporter.cause(status: 503, reason: "ServiceUnavailable") == nil)
        #expect(ConnectionRetirementReporter.cause(status: 403, reason: "InvalidProviderToken") == nil)
        #expect(ConnectionRetirementReporter.cause(status: 200, reason: nil) == nil)
    }

    @Test func eachKindIsLoggedOnceAMinuteWithHowManyCameBetween() {
        var gate = LogGate<ConnectionRetirementReporter.Cause>(quietSeconds: 60)
        #expect(gate.admit(.goaway, now: 0) == 0)
        #expect(gate.admit(.goaway, now: 1) == nil)
        #expect(gate.admit(.goaway, now: 59) == nil)
        #expect(gate.admit(.shutdown, now: 59) == 0, "another kind has its own minute")
        #expect(gate.admit(.goaway, now: 60) == 2)
        #expect(gate.admit(.goaway, now: 61) == nil)
    }

    @Test func aFlurryOfAnswersIsCountedInFullAndLoggedOnce() throws {
        let metrics = try PushdMetrics(version: "test")
        let path = NSTemporaryDirectory() + "pushd-retirements-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let reporter = ConnectionRetirementReporter(app: "shop", environment: "sandbox", metrics: metrics,
                                                    logger: Logger(level: .info, sink: FileLogSink(path: path)),
                                                    clock: { 100 })
        for _ in 0..<438 { reporter.record(.tooManyProviderTokenUpdates) }
        let text = metrics.registry.expositionText()
        #expect(text.contains("pushd_apns_connection_retirements_total{app=\"shop\",environment=\"sandbox\",reason=\"TooManyProviderTokenUpdates\"} 438"))
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 1, "\(lines)")
        let line = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any]
        #expect(line?["level"] as? String == "warning")
        #expect(line?["reason"] as? String == "TooManyProviderTokenUpdates")
        #expect(line?["app"] as? String == "shop")
    }

    @Test func aGoawayFromApnsIsCountedAndLoggedByTheDaemon() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(goawayAfterStreams: 20))
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"hi"}}' FROM generate_series(1, 100) g
                """)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.stats.goaways.count >= 1)
            // The engine judges a connection it moved requests from a quarter second later.
            func goaways() -> Int {
                let text = pipeline.context.metrics.registry.expositionText()
                let line = text.split(separator: "\n").first { $0.hasPrefix("pushd_apns_connection_retirements_total{app=\"shop\",environment=\"sandbox\",reason=\"GOAWAY\"}") }
                return line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
            }
            #expect(DaemonHarness.wait(seconds: 5) { goaways() >= 1 },
                    "\(pipeline.context.metrics.registry.expositionText().split(separator: "\n").filter { $0.contains("retire") || $0.contains("connection_errors") })")
        }
    }

    @Test func shutdownAnswersAreLoggedOnceByTheRunningDaemonAndItsJobsDeliveredAfterwards() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(shutdownRate: 1))
            let connection = try database.connect()
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: log)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"hi"}}' FROM generate_series(1, 20) g
                """)
            // Each Shutdown fails its connection, and the next waits 250 ms doubling to 4 s: about
            // a dozen in 30 s on the one loop that sends (it was one per round trip before).
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.rejected("Shutdown") >= 8 })
            try harness.mock.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 15))
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").filter { $0.contains("\"reason\":\"Shutdown\"") && $0.contains("no new stream") }
            #expect(lines.count == 1, "\(text)")
            #expect(harness.mock.stats.accepted == 20)
        }
    }
}
