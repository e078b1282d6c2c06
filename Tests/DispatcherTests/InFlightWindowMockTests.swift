import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// The adaptive in-flight limit against apns-mock: on loopback the engine keeps far fewer
/// transfers inside libcurl than connections × streams allow, and with answers 300 ms away it
/// lets in many more. Counted as easy handles the loop made: it makes one only when all of its
/// own are inside libcurl, so the count is the most it held there at once.
@Suite struct InFlightWindowMockTests {
    private static let streams = 1000

    private func run(port: Int, material: MockMaterial, adaptive: Bool, total: Int) async throws
        -> (statistics: DispatcherStatistics, collector: ResultCollector) {
        var configuration = configurationForMock(port: port, material: material, threads: 1, streams: Self.streams)
        configuration.connectionsPerThread = 1
        configuration.maxConnections = 3
        configuration.maxOutstanding = 3 * Self.streams
        configuration.adaptiveInFlight = adaptive
        let run = try await sendThroughEngine(configuration, total: total)
        #expect(run.collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
        return (run.statistics, run.collector)
    }

    @Test func onLoopbackFarFewerTransfersThanConnectionsTimesStreamsEnterLibcurl() async throws {
        try await withMock({ configuration, _ in
            configuration.maxConcurrentStreams = Self.streams
            configuration.logsAccepted = false
        }) { _, port, material in
            let total = 40_000
            let pinned = try await run(port: port, material: material, adaptive: false, total: total)
            let adaptive = try await run(port: port, material: material, adaptive: true, total: total)
            // Pinned, the window keeps a connection's 1,000 streams busy.
            #expect(pinned.statistics.easyHandles >= Self.streams)
            #expect(adaptive.statistics.easyHandles * 2 <= Self.streams,
                    "easy handles: \(adaptive.statistics.easyHandles) adaptive, \(pinned.statistics.easyHandles) pinned")
            #expect(adaptive.statistics.inFlightLimit <= Self.streams / 2)
        }
    }

    @Test func answersFarAwayLetTheLimitGrowBeyondTheLoopbackLevel() async throws {
        try await withMock({ configuration, _ in
            configuration.maxConcurrentStreams = Self.streams
            configuration.faults.delayMilliseconds = 300
            configuration.logsAccepted = false
        }) { _, port, material in
            let run = try await run(port: port, material: material, adaptive: true, total: 30_000)
            // From 100, doubling while the round trips show no queue; 1,000 streams per connection,
            // so more than that needs the connections growth opened.
            #expect(run.statistics.easyHandles > Self.streams,
                    "easy handles: \(run.statistics.easyHandles), limit \(run.statistics.inFlightLimit)")
            #expect(run.statistics.connectionsGrown >= 1)
        }
    }
}
