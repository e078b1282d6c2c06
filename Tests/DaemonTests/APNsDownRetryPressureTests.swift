import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs answering 503 to everything: once pushd sees a lane down it sends only the outage
/// probe, not every waiting notification on its own backoff, and when APNs answers again what
/// waited goes out at once, each notification once.
@Suite(.serialized) struct APNsDownRetryPressureTests {
    @Test func aDownLaneSendsOnlyItsProbesAndEverythingGoesOutOnceWhenAPNsIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let targets = 3000
            let jobs = 1000
            // pushd's own retry defaults (1 s, growing with the outage), a probe every second.
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 1000, maxMilliseconds: 600_000,
                                                       extra: "  outage_probe_ms: 1000\n")
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            let id = try CampaignLaneTests.campaign(connection, count: targets)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(900000 + g), 16, '0') || repeat(lpad(to_hex(900000 + g), 16, '0'), 3),
                       '{"aps":{"alert":"down"}}'
                FROM generate_series(1, \(jobs)) g
                """)
            let unavailable = { harness.mock.stats.rejected["503 ServiceUnavailable"] ?? 0 }
            // Every notification has been answered 503 at least once, and the lanes are down.
            #expect(try DaemonHarness.wait(seconds: 20) { unavailable() >= targets + jobs })
            Thread.sleep(forTimeInterval: 4)
            let before = unavailable()
            let window = 10.0
            Thread.sleep(forTimeInterval: window)
            let during = unavailable() - before
            // Two lanes, one app and environment each, a probe a second (±25 %): about 20.
            #expect(during <= 40, "\(during) requests reached APNs in \(Int(window)) s while it answered 503 to everything")
            print("down lanes: \(during) requests in \(Int(window)) s, \(unavailable()) answered 503 in all")

            try harness.mock.setFaults(.none)
            let total = targets + jobs
            let back = Timestamp()
            #expect(try DaemonHarness.wait(seconds: 30) {
                try harness.mock.stats.accepted >= total && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
            })
            print("everything accepted \(String(format: "%.1f", Timestamp().timeIntervalSince(back))) s after APNs answered again")
            #expect(try DaemonHarness.wait(seconds: 10) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let log = harness.mock.acceptedLog
            #expect(log.count == total)
            #expect(Set(log.map(\.token)).count == total)
        }
    }

    /// A campaign whose lane goes down stops taking fresh targets, keeping its chunks, and
    /// resumes where it stopped when APNs answers again: its targets are not all sent once into
    /// the outage and parked.
    @Test func aCampaignStopsSendingFreshTargetsIntoADownLaneAndResumesWhenAPNsIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let targets = 60_000
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 1000, maxMilliseconds: 600_000,
                                                       extra: "  outage_probe_ms: 1000\n")
            let id = try CampaignLaneTests.campaign(connection, count: targets)
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            // Some of it goes out; then APNs answers 503 to everything.
            #expect(try DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 2000 })
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let unavailable = { harness.mock.stats.rejected["503 ServiceUnavailable"] ?? 0 }
            #expect(try DaemonHarness.wait(seconds: 10) { unavailable() > 0 })
            Thread.sleep(forTimeInterval: 4)
            let before = unavailable()
            let window = 10.0
            Thread.sleep(forTimeInterval: window)
            let during = unavailable() - before
            let acceptedBefore = harness.mock.stats.accepted
            // Two workers and the parked targets, a probe a second each: about 30.
            #expect(during <= 60, "\(during) requests reached APNs in \(Int(window)) s while it answered 503 to everything")
            #expect(acceptedBefore + unavailable() < targets, "the whole campaign was sent into the outage")
            print("down campaign lane: \(during) requests in \(Int(window)) s; \(acceptedBefore) accepted and \(unavailable()) answered 503 in all")

            try harness.mock.setFaults(.none)
            let back = Timestamp()
            #expect(try DaemonHarness.wait(seconds: 60) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            print("campaign done \(String(format: "%.1f", Timestamp().timeIntervalSince(back))) s after APNs answered again")
            let campaign = try #require(try CampaignStore().campaign(connection, id: id))
            #expect(campaign.sent == targets && campaign.failed == 0, "\(campaign.failedByReason)")
            let log = harness.mock.acceptedLog
            #expect(log.count == targets)
            #expect(Set(log.map(\.token)).count == targets)
        }
    }
}
