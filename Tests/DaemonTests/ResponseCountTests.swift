import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd_apns_responses_total` counts every APNs answer, retried ones included, in every lane:
/// the campaign lane's retried 503 and 429 answers were left out, so an outage seen by a
/// campaign drain showed nowhere in it.
@Suite(.serialized) struct ResponseCountTests {
    /// The sum of the series of `name` whose labels contain `labels`.
    static func sum(_ metrics: String, _ name: String, _ labels: String) -> Int {
        metrics.split(separator: "\n").filter { $0.hasPrefix(name + "{") && $0.contains(labels) }.reduce(0) { total, line in
            total + (line.split(separator: " ").last.flatMap { Int($0) } ?? 0)
        }
    }

    @Test func retriedAnswersOfACampaignAreCountedAsAPNsGaveThem() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 50, maxMilliseconds: 300)
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer { FleetStatusTests.stop(process) }
            let id = try CampaignLaneTests.campaign(connection, count: 300)
            #expect(DaemonHarness.wait(seconds: 15) { harness.mock.stats.rejected["503 ServiceUnavailable", default: 0] >= 300 })
            try harness.mock.setFaults(FaultConfiguration(tooManyRequestsRate: 1))
            #expect(DaemonHarness.wait(seconds: 15) { harness.mock.stats.rejected["429 TooManyRequests", default: 0] >= 300 })
            try harness.mock.setFaults(.none)
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })

            var port: Int?
            #expect(DaemonHarness.wait(seconds: 10) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metrics = try SecretRedactionTests.http(String(try #require(port)), "/metrics")
            let stats = harness.mock.stats
            let name = "pushd_apns_responses_total"
            #expect(Self.sum(metrics, name, #"status="503""#) == stats.rejected["503 ServiceUnavailable", default: 0],
                    "APNs answered \(stats.rejected)")
            #expect(Self.sum(metrics, name, #"status="429""#) == stats.rejected["429 TooManyRequests", default: 0],
                    "APNs answered \(stats.rejected)")
            #expect(Self.sum(metrics, name, #"status="200""#) == stats.accepted)
        }
    }
}
