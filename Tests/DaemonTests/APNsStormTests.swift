import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs answering 503 and then 429 to every request for longer than any attempt budget would
/// last: the real `pushd run` keeps every job and target and delivers each once afterwards.
@Suite(.serialized) struct APNsStormTests {
    /// The harness's configuration file with retry settings of our own: backoffs starting at
    /// `baseMilliseconds` and capped at `maxMilliseconds`.
    static func configFile(_ harness: DaemonHarness, baseMilliseconds: Int, maxMilliseconds: Int,
                           extra: String = "") throws -> String {
        let path = try harness.writeConfigFile()
        var yaml = try String(contentsOfFile: path, encoding: .utf8)
        let retry = "retry:\n  base_delay_ms: 10\n  max_delay_ms: 200\n"
        #expect(yaml.contains(retry))
        yaml = yaml.replacingOccurrences(of: retry, with: "retry:\n  base_delay_ms: \(baseMilliseconds)\n  max_delay_ms: \(maxMilliseconds)\n\(extra)")
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func a503StormThenA429StormDeadLettersNothingAndEverythingIsDeliveredOnceAfterwards() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let targets = 3000
            let storm = 12.0
            // With retries starting at 100 ms and capped at 2 s, the default 8 attempts are spent
            // within about 8 s of answers that count, and a campaign's old 5 within 2 s.
            let config = try Self.configFile(harness, baseMilliseconds: 100, maxMilliseconds: 2000)
            // No chunk may be sent twice and no takeover is timed: leases a stalled renewal
            // cannot lose on a loaded machine.
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            let id = try CampaignLaneTests.campaign(connection, count: targets)

            // A stream of transactional jobs through both storms, each to a token of its own.
            var jobs = 0
            let stormStarted = Timestamp()
            var switchedTo429 = false
            while Timestamp().timeIntervalSince(stormStarted) < 2 * storm {
                if !switchedTo429, Timestamp().timeIntervalSince(stormStarted) >= storm {
                    try harness.mock.setFaults(FaultConfiguration(tooManyRequestsRate: 1))
                    switchedTo429 = true
                }
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(900000 + $1::int + g), 16, '0') || repeat(lpad(to_hex(900000 + $1::int + g), 16, '0'), 3),
                           '{"aps":{"alert":"storm"}}'
                    FROM generate_series(0, 9) g
                    """, [jobs])
                jobs += 10
                Thread.sleep(forTimeInterval: 0.5)
            }
            let stats = harness.mock.stats
            #expect(stats.accepted == 0, "APNs accepted \(stats.accepted) during the storms")
            try harness.mock.setFaults(.none)
            let stormEnded = Timestamp()

            let total = targets + jobs
            let store = CampaignStore()
            let drained = try DaemonHarness.wait(seconds: 30) {
                let queued = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs")
                return harness.mock.stats.accepted >= total && queued == 0
            }
            let lastDelivery = Timestamp().timeIntervalSince(stormEnded)
            print("""
                storm of \(Int(storm)) s of 503 then \(Int(storm)) s of 429, \(targets) targets and \(jobs) jobs: last delivery \
                \(String(format: "%.1f", lastDelivery)) s after the last 429, \(String(format: "%.1f", lastDelivery + storm)) s after the last 503
                """)
            #expect(drained)
            #expect(try DaemonHarness.wait(seconds: 10) { try store.campaign(connection, id: id)?.status == .done })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.failed == 0 && campaign.sent == targets, "\(campaign.failedByReason)")
            let log = harness.mock.acceptedLog
            #expect(log.count == total)
            #expect(Set(log.map(\.token)).count == total)
        }
    }
}
