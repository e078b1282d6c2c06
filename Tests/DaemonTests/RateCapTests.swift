import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A campaign's rate cap is the rate it gets, from one `pushd run` or several.
@Suite(.serialized) struct RateCapTests {
    /// Runs a capped campaign on `instances` daemons and returns the delivered rate of every
    /// `window`-second window after the first, while the campaign is sending.
    static func windowRates(instances: Int, cap: Int, targets: Int, window: Double) throws -> [Double] {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try harness.writeConfigFile()
            var processes = [ChildProcess]()
            defer {
                for process in processes { kill(process.processIdentifier, SIGTERM) }
                for process in processes { _ = DaemonProcessTests.waitForExit(process, seconds: 10) }
            }
            for instance in 0..<instances {
                processes.append(try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd-\(instance).log"))
            }
            Thread.sleep(forTimeInterval: 1)
            let id = try CampaignLaneTests.campaign(connection, count: targets, rate: cap)
            // Samples of (seconds since the first delivery, delivered so far).
            var samples = [(Double, Int)]()
            var first: Timestamp?
            let deadline = Timestamp().addingTimeInterval(Double(targets) / Double(cap) * 2 + 20)
            while Timestamp() < deadline {
                let accepted = harness.mock.stats.accepted
                if first == nil, accepted > 0 { first = Timestamp() }
                if let first { samples.append((Timestamp().timeIntervalSince(first), accepted)) }
                if accepted >= targets { break }
                Thread.sleep(forTimeInterval: 0.1)
            }
            #expect(try DaemonHarness.wait(seconds: 10) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == targets)
            func delivered(at time: Double) -> Int { samples.last { $0.0 <= time }?.1 ?? 0 }
            // Whole windows after the first, while fewer than all targets were delivered.
            let sendingUntil = samples.first { $0.1 >= targets }?.0 ?? samples.last?.0 ?? 0
            var rates = [Double]()
            var start = window
            while start + window <= sendingUntil {
                rates.append(Double(delivered(at: start + window) - delivered(at: start)) / window)
                start += window
            }
            return rates
        }
    }

    /// A capped campaign's chunk released early, as its instance stops, gives back the time its
    /// lease reserved at the cap for the targets it did not send: the instance started next goes
    /// on at once, not after the rest of the chunk's time (100 s: 1,000 targets at 10/s).
    @Test func aCappedCampaignGoesOnAtOnceAfterItsInstanceRestarts() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try harness.writeConfigFile()
            let id = try CampaignLaneTests.campaign(connection, count: 2000, rate: 10)
            let first = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd-0.log")
            #expect(try DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 20 })
            kill(first.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(first, seconds: 20))
            let waiting = try connection.query("""
                SELECT extract(epoch FROM next_lease_at - now())::float8 FROM pushd.campaigns WHERE id = $1
                """, [id]).get(Double.self, row: 0, column: 0)
            #expect((waiting ?? 0) < 2, "the campaign's next lease waits \(waiting ?? 0) s after its instance stopped")
            let before = harness.mock.stats.accepted
            let second = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd-1.log")
            defer {
                kill(second.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(second, seconds: 10)
            }
            let restarted = Timestamp()
            let goesOn = try DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= before + 20 }
            print("capped at 10/s: \(before) accepted before the restart, then \(harness.mock.stats.accepted - before) in \(Int(Timestamp().timeIntervalSince(restarted))) s after it")
            #expect(goesOn, "the restarted instance sent \(harness.mock.stats.accepted - before) in 20 s")
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == harness.mock.acceptedLog.count, "a target was accepted twice")
        }
    }

    /// A cap a debug build drains well above on a busy two-core machine.
    @Test(arguments: [1, 2, 3])
    func theDeliveredRateOfACappedCampaignIsItsCapWithinFivePercent(instances: Int) throws {
        let cap = 600
        let rates = try Self.windowRates(instances: instances, cap: cap, targets: 13_200, window: 5)
        print("cap \(cap)/s on \(instances) instance(s): 5-second windows at \(rates.map { String(format: "%.0f", $0) }.joined(separator: ", ")) per second")
        #expect(rates.count >= 3)
        for rate in rates {
            #expect(abs(rate - Double(cap)) <= 0.05 * Double(cap), "\(rate)/s against a cap of \(cap)/s")
        }
    }
}
