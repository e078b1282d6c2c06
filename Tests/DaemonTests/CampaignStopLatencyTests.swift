import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd campaign cancel` and `pause` stop the sending at once, not at the workers' next
/// checkpoint (up to 2 s later: at 30,000/s, 60,000 more notifications of a campaign sent by
/// mistake).
@Suite(.serialized) struct CampaignStopLatencyTests {
    /// A campaign paced at 2,000/s by its app's `campaign_rate` (each worker paces its chunks,
    /// and with 10 s leases checkpoints every 2 s): after the command returns, no more than what
    /// was in flight and 125 ms of sends reach APNs (the notification and the watch's look take
    /// milliseconds; the rest is room for a loaded machine). Seen at the next checkpoint
    /// instead, up to 4,000 would, and 250 or fewer in 6 % of runs.
    func stopSends(_ stop: (CampaignStore, PGConnection, Int64) throws -> CampaignStatus, expected: CampaignStatus) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let store = CampaignStore()
            let rate = 2000
            let config = try CampaignLaneTests.configCapped(harness, rate: rate)
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let id = try CampaignLaneTests.campaign(connection, count: 30_000)

            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer { FleetStatusTests.stop(process) }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 3000 })

            #expect(try stop(store, connection, id) == expected)
            let atStop = harness.mock.stats.accepted
            usleep(1_500_000)
            let after = harness.mock.stats.accepted - atStop
            #expect(after <= rate / 8, "\(after) notifications accepted after the campaign was \(expected.rawValue) (\(atStop) before)")

            // What was answered is counted once the workers stopped.
            let counted = { (try? store.campaign(connection, id: id)).flatMap { $0.map { $0.sent + $0.failed } } ?? -1 }
            #expect(DaemonHarness.wait(seconds: 10) { counted() == harness.mock.stats.accepted },
                    "the campaign counts \(counted()); APNs accepted \(harness.mock.stats.accepted)")
        }
    }

    @Test func aCancelStopsTheSendingAtOnce() throws {
        try stopSends({ store, connection, id in try store.cancel(connection, id: id) }, expected: .cancelled)
    }

    @Test func aPauseStopsTheSendingAtOnce() throws {
        try stopSends({ store, connection, id in try store.pause(connection, id: id) }, expected: .paused)
    }
}
