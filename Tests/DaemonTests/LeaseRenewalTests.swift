import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two real `pushd run` instances on one database drain a campaign through faults that hold a
/// campaign worker longer than its lease between two checkpoints (sending parked retries after
/// a 503 storm; waiting on the engine while APNs is down). The instance's lease keeper extends
/// the leases of its live workers' chunks meanwhile: no chunk is taken over from a live
/// instance, and no notification is sent twice.
@Suite(.serialized) struct LeaseRenewalTests {
    /// Both instances' configuration: 6 s leases, retries from 100 ms to 2 s, `rate` per instance.
    static func configFile(_ harness: DaemonHarness, rate: Int, maxInFlight: Int? = nil) throws -> String {
        let path = try harness.writeConfigFile(rate: rate)
        var yaml = try String(contentsOfFile: path, encoding: .utf8)
        #expect(yaml.contains("  lease_s: 3\n"))
        yaml = yaml.replacingOccurrences(of: "  lease_s: 3\n", with: "  lease_s: 6\n")
        yaml = yaml.replacingOccurrences(of: "retry:\n  base_delay_ms: 10\n  max_delay_ms: 200\n",
                                         with: "retry:\n  base_delay_ms: 100\n  max_delay_ms: 2000\n")
        if let maxInFlight {
            yaml = yaml.replacingOccurrences(of: "  threads: 1\n", with: "  threads: 1\n  max_in_flight: \(maxInFlight)\n")
            // The transactional batches must fit the window too (4 workers).
            yaml = yaml.replacingOccurrences(of: "campaigns:\n", with: "workers:\n  batch_size: \(maxInFlight / 4)\ncampaigns:\n")
        }
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Starts two instances, runs `fault` once the campaign is sending, waits for the campaign
    /// to finish and checks that nothing was taken over or sent twice.
    private func drainWithTwoInstances(targets: Int, rate: Int, maxInFlight: Int? = nil, chunkSize: Int = 1000,
                                       fault: (DaemonHarness) throws -> Void) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try Self.configFile(harness, rate: rate, maxInFlight: maxInFlight)
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "lease keeping", pushType: "alert",
                                                              payload: #"{"aps":{"alert":"sale"}}"#))
            let list = (1...targets).map { (token: DaemonHarness.token($0), payload: String?.none) }
            #expect(try store.importTargets(connection, campaignID: id, targets: list, chunkSize: chunkSize).imported == targets)
            #expect(try store.start(connection, id: id) == .running)
            let logs = [harness.directory + "/pushd-a.log", harness.directory + "/pushd-b.log"]
            let processes = try logs.map { try DaemonProcessTests.start(config: config, log: $0) }
            defer {
                for process in processes { kill(process.processIdentifier, SIGTERM) }
                for process in processes { _ = DaemonProcessTests.waitForExit(process, seconds: 10) }
            }
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted >= targets / 10 })
            let first = harness.mock
            try fault(harness)
            let done = try DaemonHarness.wait(seconds: 180) { try store.campaign(connection, id: id)?.status == .done }
            #expect(done)
            Thread.sleep(forTimeInterval: 2)
            // A restarted mock starts a log of its own: the stopped one's is counted too.
            var accepted = first.acceptedLog.map(\.token)
            if harness.mock !== first { accepted += harness.mock.acceptedLog.map(\.token) }
            var counts = [String: Int]()
            for token in accepted { counts[token, default: 0] += 1 }
            let twice = counts.values.filter { $0 > 1 }.count
            let text = logs.map { (try? String(contentsOfFile: $0, encoding: .utf8)) ?? "" }
            let takeovers = text.map { $0.components(separatedBy: "took over chunk").count - 1 }
            let lost = text.map { $0.components(separatedBy: "lost the lease").count - 1 }
            print("\(targets) targets on two instances: \(counts.count) accepted, \(twice) more than once; chunks taken over \(takeovers), leases lost \(lost)")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == targets && campaign.failed == 0, "\(campaign.failedByReason)")
            #expect(counts.count == targets)
            #expect(twice == 0, "\(twice) notifications sent more than once")
            #expect(takeovers == [0, 0], "chunks taken over from a live instance: \(takeovers)")
        }
    }

    @Test func aStormWhileParkedRetriesAreSentTakesNoChunkFromALiveInstance() throws {
        // Chunks of 100 finish sending within seconds and park what the storm refused; at
        // 50/s per instance, shared by its two workers, a parked batch of 200 then holds its
        // worker longer than the 6 s lease while the worker's newer chunks wait.
        try drainWithTwoInstances(targets: 3000, rate: 50, chunkSize: 100) { harness in
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            Thread.sleep(forTimeInterval: 10)
            try harness.mock.setFaults(FaultConfiguration(tooManyRequestsRate: 1))
            Thread.sleep(forTimeInterval: 4)
            try harness.mock.setFaults(.none)
        }
    }

    @Test func aTwentySecondOutageTakesNoChunkFromALiveInstance() throws {
        // A small window: around the outage the workers wait on a full engine.
        try drainWithTwoInstances(targets: 40_000, rate: 1000, maxInFlight: 400) { harness in
            harness.mock.stop()
            Thread.sleep(forTimeInterval: 20)
            try harness.restartMock()
        }
    }
}
