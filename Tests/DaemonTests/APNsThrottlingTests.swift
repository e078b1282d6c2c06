import APNs
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs answering 429 TooManyRequests to every notification for a while: Apple's 429 is about
/// one device, so each notification waits out its own backoff and nothing is lost; but when
/// most answers are 429, APNs is throttling the provider and nothing gets through. The real
/// `pushd run` says so: one warning line, `pushd_apns_throttled` 1 and `/readyz` not ready
/// naming the lane; when answers go through again, one notice, the gauge 0, ready again, and
/// every job delivered once.
@Suite(.serialized) struct APNsThrottlingTests {
    static func gauge(_ metrics: String) -> [String] {
        metrics.split(separator: "\n").map(String.init)
            .filter { $0.hasPrefix("pushd_apns_throttled{") && $0.contains("app=\"shop\"") && $0.contains("lane=\"transactional\"") }
    }

    @Test func aLaneAnsweredMostly429IsNamedUntilAnswersGoThroughAgain() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            // Backoffs of 100 ms to 1 s: each job is tried again about every second.
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 100, maxMilliseconds: 1000)
            try harness.mock.setFaults(FaultConfiguration(tooManyRequestsRate: 1))
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
            let jobs = 100
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(700000 + g), 16, '0') || repeat(lpad(to_hex(700000 + g), 16, '0'), 3),
                       '{"aps":{"alert":"throttled"}}'
                FROM generate_series(1, \(jobs)) g
                """)
            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("429 TooManyRequests") }, "\(daemon.readyz())")
            let readyz = daemon.readyz()
            #expect(!readyz.hasPrefix("ready:") && readyz.contains("app shop") && readyz.contains("transactional lane"), "\(readyz)")
            // The gauge and the line are written by the worker after the state /readyz reads.
            #expect(DaemonHarness.wait(seconds: 5) {
                Self.gauge(daemon.metrics()).contains { $0.hasSuffix(" 1") } && daemon.text.contains("\"event\":\"apns_throttling\"")
            }, "\(Self.gauge(daemon.metrics()))")
            let warnings = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"apns_throttling\"") }
            #expect(warnings.count == 1 && warnings.first?.contains("\"level\":\"warning\"") == true, "\(warnings)")
            #expect(harness.mock.stats.accepted == 0)

            try harness.mock.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
            })
            #expect(harness.mock.stats.accepted == jobs)
            #expect(DaemonHarness.wait(seconds: 15) { daemon.readyz().hasPrefix("ready:") }, "\(daemon.readyz())")
            #expect(DaemonHarness.wait(seconds: 5) {
                Self.gauge(daemon.metrics()).allSatisfy { $0.hasSuffix(" 0") } && !Self.gauge(daemon.metrics()).isEmpty
                    && daemon.text.contains("\"event\":\"apns_throttling_over\"")
            }, "\(Self.gauge(daemon.metrics()))")
            let over = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"apns_throttling_over\"") }
            #expect(over.count == 1, "\(over)")
            #expect(daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"apns_throttling\"") }.count == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        }
    }
}
