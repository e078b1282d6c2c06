import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd campaign cancel` while chunks are being sent: the workers stop at their next
/// checkpoint and every answer APNs gave is counted in the campaign and in the metric.
@Suite(.serialized) struct CampaignCancelTests {
    @Test func aCancelMidDrainCountsEveryAnswerAndNothingIsSentOnceItsChunksStopped() throws {
        try IsolatedDatabase.with { database in
            // Answers take 300 to 600 ms: at 250/s about a hundred requests are in flight at the cancel.
            let harness = try DaemonHarness(database: database,
                                            faults: FaultConfiguration(delayMilliseconds: 300, randomDelayMilliseconds: 300))
            let connection = try database.connect()
            let count = 3000
            let id = try CampaignLaneTests.campaign(connection, count: count, rate: 250)
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            let store = CampaignStore()
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 500 })

            // What `pushd campaign cancel` does.
            #expect(try store.cancel(connection, id: id) == .cancelled)
            let dropped = try store.dropTargets(connection, id: id)
            #expect(dropped > 0 && dropped < count, "\(dropped) targets dropped at the cancel")

            // The chunks being sent stop at their next checkpoint, record their answers, and a
            // campaign worker's sweep drops them then.
            let chunksLeft = "SELECT count(*)::int FROM pushd.campaign_chunks WHERE campaign_id = \(id)"
            #expect(try DaemonHarness.wait(seconds: 15) { try DaemonHarness.count(connection, chunksLeft) == 0 })
            let acceptedWhenStopped = harness.mock.stats.accepted
            usleep(1_500_000)
            #expect(harness.mock.stats.accepted == acceptedWhenStopped,
                    "\(harness.mock.stats.accepted - acceptedWhenStopped) notifications were accepted after the campaign's chunks were gone")

            let accepted = Set(harness.mock.acceptedLog.map(\.token)).count
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.status == .cancelled)
            #expect(campaign.sent + campaign.failed == accepted,
                    "the campaign counts \(campaign.sent) sent and \(campaign.failed) failed; APNs accepted \(accepted) tokens")
            #expect(try DaemonHarness.count(connection, "SELECT count(*)::int FROM pushd.campaign_targets WHERE campaign_id = \(id)") == 0)

            // The metric follows the campaign's counters.
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 10) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metrics = try SecretRedactionTests.http(String(try #require(port)), "/metrics")
            let prefix = "pushd_campaign_targets_processed_total{app=\"shop\",status=\"sent\"} "
            let sentMetric = metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) }
            #expect(sentMetric == campaign.sent, "the metric says \(sentMetric.map(String.init) ?? "nothing") sent, the campaign \(campaign.sent)")

            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(!text.contains("lost the lease"), "a cancel was logged as a lost lease")
        }
    }
}
