import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// Answer coalescing against apns-mock answering after 100–150 ms, so answers trickle in a few
/// at a time as from a far APNs: with it the loop hands its socket to libcurl (which then runs
/// every transfer on the connection) far fewer times for the same answers.
@Suite struct AnswerCoalescingMockTests {
    private static let streams = 200

    private func run(port: Int, material: MockMaterial, coalescingMilliseconds: Int, total: Int) async throws
        -> (statistics: DispatcherStatistics, collector: ResultCollector) {
        var configuration = configurationForMock(port: port, material: material, threads: 1, streams: Self.streams)
        configuration.connectionsPerThread = 1
        configuration.answerCoalescingMilliseconds = coalescingMilliseconds
        let run = try await sendThroughEngine(configuration, total: total)
        return (run.statistics, run.collector)
    }

    @Test func manyRequestsInFlightAtALongRoundTripAreReadInFewerLargerBatches() async throws {
        try await withMock({ configuration, _ in
            configuration.maxConcurrentStreams = Self.streams
            configuration.faults.delayMilliseconds = 100
            configuration.faults.randomDelayMilliseconds = 50
            configuration.logsAccepted = false
        }) { _, port, material in
            let total = 3000
            let plain = try await run(port: port, material: material, coalescingMilliseconds: 0, total: total)
            let coalesced = try await run(port: port, material: material, coalescingMilliseconds: 50, total: total)
            for run in [plain, coalesced] {
                #expect(run.collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
                #expect(run.statistics.retried == 0)
            }
            // Answers spread over 50 ms come a few per millisecond: read at once, hundreds of
            // reads; at most one per ~31 ms (a quarter of the round trip) while they trickle.
            // Quietly the plain run reads 8 to 16 times as often (714–967 against 59–102 reads);
            // a host that stalls the loop or the mock makes the plain run read answers in
            // batches too (205 against 78 once in a full suite run), so the bound is half, not
            // a third: without coalescing both runs read alike and this still fails.
            #expect(coalesced.statistics.socketReads * 2 < plain.statistics.socketReads,
                    "socket reads: \(coalesced.statistics.socketReads) coalesced, \(plain.statistics.socketReads) at once")
        }
    }
}
