import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Targets waiting for a retry never hold a campaign worker: the real `pushd run`.
@Suite(.serialized) struct CampaignParkingTests {
    @Test func retriesWaitingOnThrottledTargetsDoNotHoldBackTheRestOfTheCampaign() throws {
        try IsolatedDatabase.with { database in
            // 1% of answers 429 and 1% 500: every chunk of a thousand has a score of targets that
            // wait, those answered 429 up to 10 s.
            let harness = try DaemonHarness(database: database,
                                            faults: FaultConfiguration(tooManyRequestsRate: 0.01, internalServerErrorRate: 0.01))
            let connection = try database.connect()
            let targets = 10_000
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 100, maxMilliseconds: 10_000)
            // No target may be sent twice and no takeover is timed: leases a stalled renewal
            // cannot lose on a loaded machine.
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let id = try CampaignLaneTests.campaign(connection, count: targets)
            let started = Timestamp()
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            // Every target is tried once at the pace of a campaign without faults (a few
            // seconds), not a chunk per slowest retry (ten chunks, two workers, ~10 s each).
            let firstPass = DaemonHarness.wait(seconds: 15) { harness.mock.stats.perToken.count >= targets }
            let firstPassSeconds = Timestamp().timeIntervalSince(started)
            #expect(firstPass, "\(harness.mock.stats.perToken.count) of \(targets) targets tried after 15 s")
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            print("10,000 targets with 1% 429 and 1% 500: every target tried once after \(String(format: "%.1f", firstPassSeconds)) s, done after \(String(format: "%.1f", Timestamp().timeIntervalSince(started))) s")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == targets && campaign.failed == 0, "\(campaign.failedByReason)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries") == 0)
            let log = harness.mock.acceptedLog
            #expect(log.count == targets)
            #expect(Set(log.map(\.token)).count == targets)
        }
    }
}

/// A cancelled campaign sends nothing more; what it had parked for a retry goes, visibly.
@Suite(.serialized) struct CancelledCampaignParkingTests {
    @Test func targetsParkedWhenTheirCampaignIsCancelledAreDroppedAndCountedAsCancelled() throws {
        try IsolatedDatabase.with { database in
            // Every answer is a 500: each target is retried, parked seconds away.
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(internalServerErrorRate: 1.0))
            let connection = try database.connect()
            var config = harness.config()
            config.retry.baseDelayMilliseconds = 20_000
            config.retry.maxDelayMilliseconds = 30_000
            let targets = 20
            let id = try CampaignLaneTests.campaign(connection, count: targets)
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let parkedSQL = "SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id)"
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, parkedSQL) == targets },
                    "the campaign's targets were not parked for their retry")

            let store = CampaignStore()
            #expect(try store.cancel(connection, id: id) == .cancelled)
            // Claims take only running campaigns' targets: without the sweep these rows stay for good.
            let dropped = try DaemonHarness.wait(seconds: 15) { try DaemonHarness.count(connection, parkedSQL) == 0 }
            let left = try DaemonHarness.count(connection, parkedSQL)
            #expect(dropped, "\(left) targets of the cancelled campaign are still parked")
            let line = "pushd_campaign_targets_processed_total{app=\"shop\",status=\"cancelled\"} \(targets)"
            #expect(DaemonHarness.wait(seconds: 5) { pipeline.context.metrics.registry.expositionText().contains(line) },
                    "\(pipeline.context.metrics.registry.expositionText().split(separator: "\n").filter { $0.contains("campaign_targets_processed") })")
            // The campaign's counters leave them unsent, as every other target a cancel stopped.
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.status == .cancelled)
            #expect(campaign.sent == 0 && campaign.failed == 0 && campaign.remaining == targets)
        }
    }
}
