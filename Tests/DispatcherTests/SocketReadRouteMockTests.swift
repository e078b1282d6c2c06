import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// Reading a connection's socket through one of its transfers against apns-mock answering after
/// 100–150 ms: every answer still arrives, once, and the reads went that way.
@Suite struct SocketReadRouteMockTests {
    private static let streams = 200

    @Test func answersAtALongRoundTripAllArriveWhenSocketsAreReadThroughOneTransfer() async throws {
        try await withMock({ configuration, _ in
            configuration.maxConcurrentStreams = Self.streams
            configuration.faults.delayMilliseconds = 100
            configuration.faults.randomDelayMilliseconds = 50
            configuration.logsAccepted = false
        }) { _, port, material in
            let total = 3000
            for coalescing in [0, 25] {
                var configuration = configurationForMock(port: port, material: material, threads: 1, streams: Self.streams)
                configuration.connectionsPerThread = 2
                configuration.answerCoalescingMilliseconds = coalescing
                configuration.readsSocketsThroughOneTransfer = true
                let run = try await sendThroughEngine(configuration, total: total)
                let results = run.collector.snapshot().results
                #expect(results.count == total)
                #expect(results.values.allSatisfy { $0.response?.status == 200 })
                #expect(run.statistics.retried == 0)
                #expect(run.statistics.resentByTransport == 0)
                // Most reads went through one transfer (the first of each connection, before a
                // request was sent on it, and any after a read that finished nothing did not).
                #expect(run.statistics.socketReadsThroughOneTransfer * 2 > run.statistics.socketReads,
                        "\(run.statistics.socketReadsThroughOneTransfer) of \(run.statistics.socketReads) reads through one transfer")
            }
        }
    }
}
