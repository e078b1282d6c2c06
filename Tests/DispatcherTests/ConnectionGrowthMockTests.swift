import APNs
import Posix
import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// Connection growth against apns-mock answering after a delay with few streams per
/// connection: when every stream is busy and requests wait, the engine opens more connections,
/// never more than `maxConnections`.
@Suite struct ConnectionGrowthMockTests {
    /// Streams per connection on the mock and in the engine.
    private static let streams = 10
    private static let delayMilliseconds = 100

    private func run(port: Int, material: MockMaterial, maxConnections: Int?, total: Int,
                     metrics: any DispatcherMetricsHook = NoDispatcherMetrics()) async throws
        -> (statistics: DispatcherStatistics, collector: ResultCollector, seconds: Double) {
        var configuration = configurationForMock(port: port, material: material, threads: 1, streams: Self.streams)
        configuration.connectionsPerThread = 1
        configuration.maxConnections = maxConnections
        configuration.connectionGrowthDelayMilliseconds = 50
        // Each added connection is judged over five round trips (50 answers or more per window).
        configuration.connectionGrowthJudgedOverMilliseconds = 500
        // Far more work than one connection's streams, so requests wait in the engine.
        configuration.maxOutstanding = 400
        return try await sendThroughEngine(configuration, total: total, metrics: metrics)
    }

    private func withSlowMock<T>(_ body: (APNsMockServer, Int, MockMaterial) async throws -> T) async throws -> T {
        try await withMock({ configuration, _ in
            configuration.maxConcurrentStreams = Self.streams
            configuration.faults.delayMilliseconds = Self.delayMilliseconds
            configuration.logsAccepted = false
        }, body)
    }

    @Test func busyStreamsWithRequestsWaitingOpenMoreConnectionsUpToTheCeiling() async throws {
        try await withSlowMock { server, port, material in
            let total = 1200
            let metrics = RecordingMetrics()
            let run = try await run(port: port, material: material, maxConnections: 4, total: total, metrics: metrics)
            #expect(run.collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
            #expect(run.statistics.connectionsGrown == 3)
            #expect(run.statistics.peakOpenConnections == 4)
            #expect(server.stats.connectionsAccepted == 4)
            #expect(run.statistics.retried == 0)
            // Each added connection was judged and kept, and the hook heard why: the rate rose
            // by at least what was required (the last one may still be on trial at the end).
            let verdicts = metrics.growthVerdicts
            #expect((2...3).contains(verdicts.count))
            for (index, verdict) in verdicts.enumerated() {
                #expect(verdict.kept && verdict.connections == index + 2 && verdict.growthHeldOffMilliseconds == 0)
                #expect(verdict.ratePerSecondAfter >= verdict.ratePerSecondRequired)
                #expect(verdict.ratePerSecondRequired > verdict.ratePerSecondBefore)
            }
            // One connection answers 10 streams per 100 ms: 12 s for 1,200. Four do it in about
            // a third of that, growth included.
            #expect(run.seconds < 8)
        }
    }

    @Test func withoutACeilingAboveTheConfiguredConnectionsNoneIsAdded() async throws {
        try await withSlowMock { server, port, material in
            let run = try await run(port: port, material: material, maxConnections: nil, total: 200)
            #expect(run.collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
            #expect(run.statistics.connectionsGrown == 0)
            #expect(run.statistics.peakOpenConnections == 1)
            #expect(server.stats.connectionsAccepted == 1)
        }
    }
}
