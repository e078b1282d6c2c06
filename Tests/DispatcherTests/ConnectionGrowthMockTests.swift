import APNs
import Posix
import APNsMock
@testable import Dispatcher
import Foundation
import Locking
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
            // by at least what was required (the last one may have been on trial when the work
            // ran out, and abandoned).
            let verdicts = metrics.growthVerdicts.filter { $0.abandoned == nil }
            #expect((2...3).contains(verdicts.count))
            #expect(metrics.growthVerdicts.count == 3, "\(metrics.growthVerdicts)")
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

    /// Slows the loop down once it has grown, as a host that got busy does: the hook runs on the
    /// loop's thread, and each answer then costs it `answerCost`, so it reads answers slower than
    /// the mock gives them and every pass finds some, adds requests for them and finds libcurl's
    /// timer due. Notes when the loop grew and when the connection was judged.
    private final class BusyAfterGrowth: DispatcherMetricsHook, @unchecked Sendable {
        static let answerCost: UInt32 = 8000
        private let state = Lock<(grewAt: Timestamp?, judgedAt: Timestamp?, verdict: ConnectionGrowthVerdict?)>((nil, nil, nil))
        var grewAt: Timestamp? { state.withLock { $0.grewAt } }
        var judgedAt: Timestamp? { state.withLock { $0.judgedAt } }
        var verdict: ConnectionGrowthVerdict? { state.withLock { $0.verdict } }

        func requestCompleted(status: Int, latencyNanoseconds: UInt64) {
            let busy = state.withLock { $0.grewAt != nil && $0.judgedAt == nil }
            if busy { usleep(Self.answerCost) }
        }

        func connectionLimitChanged(to connections: Int) {
            if connections == 2 { state.withLock { if $0.grewAt == nil { $0.grewAt = Timestamp() } } }
        }

        func connectionGrowthJudged(_ verdict: ConnectionGrowthVerdict) {
            state.withLock { if $0.judgedAt == nil { $0.judgedAt = Timestamp(); $0.verdict = verdict } }
        }
    }

    /// The loop judges growth before it runs a due libcurl timer, not only on passes without
    /// one: a saturated loop finds the timer due on nearly every pass. Run first, the timer
    /// put the verdict off until the work ran out (6.7–10.2 s here, for a 0.55 s trial).
    @Test func aConnectionOnTrialIsJudgedWhileTheLoopIsBusyWithAnswersOnEveryPass() async throws {
        try await withMock({ configuration, _ in
            configuration.maxConcurrentStreams = 20
            // Answers spread over 20–40 ms: more arrive while the busy loop works through others.
            configuration.faults.delayMilliseconds = 20
            configuration.faults.randomDelayMilliseconds = 20
            configuration.logsAccepted = false
        }) { _, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 20)
            configuration.connectionsPerThread = 1
            configuration.maxConnections = 2
            configuration.connectionGrowthDelayMilliseconds = 50
            configuration.connectionGrowthJudgedOverMilliseconds = 500
            configuration.maxOutstanding = 400
            // The campaign lane's reading: one transfer reads a socket, the others run on the timer.
            configuration.readsSocketsThroughOneTransfer = true
            configuration.answerCoalescingMilliseconds = 25
            configuration.answerCoalescingMinimumInFlight = 10
            let metrics = BusyAfterGrowth()
            // About 500 answers/s on one connection; once grown the busy loop manages at most 125/s.
            let run = try await sendThroughEngine(configuration, total: 1500, metrics: metrics)
            #expect(run.collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
            let grewAt = try #require(metrics.grewAt)
            // Its first answer, 50 ms to settle, a 500 ms window, and a pass of the busy loop
            // (up to 40 answers of 8 ms): 1.0–1.4 s quietly.
            let judgedAt = try #require(metrics.judgedAt, "no verdict on the connection added \(Timestamp().timeIntervalSince(grewAt)) s before the end")
            #expect(judgedAt.timeIntervalSince(grewAt) < 4, "judged \(judgedAt.timeIntervalSince(grewAt)) s after it was added")
            // The busy loop answers no faster with it: it is given up.
            #expect(metrics.verdict?.kept == false)
        }
    }

    /// A trial whose work runs out before it is judged ends with a verdict all the same, while
    /// the engine runs on: the connection goes back and no growth is held off, since nothing
    /// was measured. Run first, the loop slept with the trial open and no verdict came at all
    /// (a drain that ended during a trial showed a third connection and no verdict).
    @Test func aTrialWhoseWorkRunsOutEndsWithAVerdictThatHoldsNothingOff() async throws {
        try await withSlowMock { _, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: Self.streams)
            configuration.connectionsPerThread = 1
            configuration.maxConnections = 2
            configuration.connectionGrowthDelayMilliseconds = 50
            configuration.connectionGrowthJudgedOverMilliseconds = 500
            configuration.maxOutstanding = 400
            let metrics = RecordingMetrics()
            let limits = Lock<[Int]>([])
            let hook = LimitRecorder(metrics: metrics, limits: limits)
            let collector = ResultCollector()
            let engine = try HTTP2Dispatcher(configuration: configuration, metrics: hook, onResult: collector.handler)
            defer { engine.shutdown() }
            // About 100 answers a second on one connection: growth after a waited window (0.55 s
            // and more), and the last 60 answered before the trial's 0.5 s window ends.
            let total = 120
            try await onOwnThread {
                for tag in 0..<total { engine.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
            }
            #expect(await collector.wait(for: total, seconds: 30) == total)
            #expect(limits.withLock { $0.first } == 2, "the loop did not grow: \(limits.withLock { $0 })")
            let deadline = Timestamp() + 3
            while metrics.growthVerdicts.isEmpty, Timestamp() < deadline { try await Task.sleep(for: .milliseconds(20)) }
            let verdicts = metrics.growthVerdicts
            #expect(verdicts.count == 1, "verdicts with the engine still running: \(verdicts)")
            #expect(verdicts.first?.kept == false && verdicts.first?.connections == 1)
            #expect(verdicts.first?.growthHeldOffMilliseconds == 0, "\(verdicts)")
            #expect(verdicts.first?.abandoned == .workRanOut)
            #expect(limits.withLock { $0 } == [2, 1])
        }
    }

    /// Records the connection limits a loop sets, and passes verdicts on to `metrics`.
    private final class LimitRecorder: DispatcherMetricsHook, @unchecked Sendable {
        let metrics: RecordingMetrics
        let limits: Lock<[Int]>
        init(metrics: RecordingMetrics, limits: Lock<[Int]>) {
            self.metrics = metrics
            self.limits = limits
        }
        func connectionLimitChanged(to connections: Int) { limits.withLock { $0.append(connections) } }
        func connectionGrowthJudged(_ verdict: ConnectionGrowthVerdict) { metrics.connectionGrowthJudged(verdict) }
    }
}
