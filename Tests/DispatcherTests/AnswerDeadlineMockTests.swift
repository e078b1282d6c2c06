import APNsMock
@testable import Dispatcher
import Foundation
import Polling
import Testing

/// The answer deadline against apns-mock: a request the engine still holds when a whole
/// request timeout no longer fits before its deadline is answered `notSent` and never goes on
/// the wire afterwards, so a caller that waits for the deadline never gives it up while the
/// engine may still send it.
@Suite struct AnswerDeadlineMockTests {
    private static let requestTimeout = 1000
    private static let answerDeadline = 1600

    @Test func aRequestHeldPastItsDeadlineIsAnsweredNotSentAndNeverReachesTheServer() async throws {
        // Answers 3 s away: the first request fills the only stream until it times out, the
        // second waits behind it in the engine.
        try await withMock({ configuration, _ in configuration.faults.delayMilliseconds = 3000 }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 1, maxAttempts: 1)
            configuration.connectionsPerThread = 1
            configuration.requestTimeoutMilliseconds = Self.requestTimeout
            configuration.answerDeadlineMilliseconds = Self.answerDeadline
            let collector = ResultCollector()
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: collector.handler)
            defer { engine.shutdown(drainTimeoutMilliseconds: 0) }
            let started = monotonicNanoseconds()
            engine.submit(try unauthenticatedRequest(1), tag: 1)
            engine.submit(try unauthenticatedRequest(2), tag: 2)
            #expect(await collector.wait(for: 2, seconds: 10) == 2)
            let answered = Double(monotonicNanoseconds() - started) / 1e6
            let results = collector.snapshot().results
            // The first went on the wire and timed out: not "not sent".
            #expect(results[1]?.transportError?.code == 28, "first: \(String(describing: results[1]?.outcome))")
            #expect(results[2]?.notSent?.answerDeadlineMilliseconds != nil, "second: \(String(describing: results[2]?.outcome))")
            // Answered once the first attempt's time-out left no room for it, well before its deadline's end.
            #expect(answered < Double(Self.answerDeadline) + 1000, "both answered after \(Int(answered)) ms")
            #expect(engine.statistics.pastDeadline == 1)
            // Past the mock's delay: only the first request ever reached it.
            try await Task.sleep(nanoseconds: 3_500_000_000)
            #expect(server.stats.requestsReceived == 1, "the mock received \(server.stats.requestsReceived) requests")
            #expect(collector.snapshot().timesReported.values.allSatisfy { $0 == 1 })
        }
    }

    @Test func withoutADeadlineTheHeldRequestIsSentWhenAStreamFrees() async throws {
        // The engine's behaviour without the setting: the held request goes out late, which is
        // what a caller that gave up on it earlier would send twice.
        try await withMock({ configuration, _ in configuration.faults.delayMilliseconds = 3000 }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 1, maxAttempts: 1)
            configuration.connectionsPerThread = 1
            configuration.requestTimeoutMilliseconds = Self.requestTimeout
            let collector = ResultCollector()
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: collector.handler)
            defer { engine.shutdown(drainTimeoutMilliseconds: 0) }
            engine.submit(try unauthenticatedRequest(1), tag: 1)
            engine.submit(try unauthenticatedRequest(2), tag: 2)
            #expect(await collector.wait(for: 2, seconds: 10) == 2)
            #expect(collector.snapshot().results[2]?.notSent == nil)
            #expect(server.stats.requestsReceived == 2)
        }
    }
}
