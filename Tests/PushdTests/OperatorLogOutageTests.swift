import APNs
import Foundation
import Locking
import Testing
@testable import pushd

/// When the operator log calls a lane cut off from APNs, which also sets
/// `pushd_apns_unavailable`, fails `/readyz` and makes `pushd status` exit 1.
@Suite struct OperatorLogOutageTests {
    final class Clock: Sendable {
        let now = Lock(1000.0)
        func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
    }

    static let ok = SendOutcome.response(APNsResponse(status: 200))
    static let error500 = SendOutcome.response(APNsResponse(status: 500, reason: .internalServerError))

    static func make() -> (OperatorLog, MemoryLogSink, Clock) {
        let sink = MemoryLogSink()
        let clock = Clock()
        let log = OperatorLog(logger: Logger(level: .info, sink: sink), summaryInterval: 3600, clock: { clock.now.withLock { $0 } })
        return (log, sink, clock)
    }

    @Test func shortRunsOfErrorsAmongManyAnswersAreNoOutage() {
        let (log, sink, clock) = Self.make()
        // 20,000 answers a second with runs of three and four 500s among them, for 5 s.
        for _ in 0..<500 {
            for _ in 0..<196 { log.record(Self.ok, app: "shop", lane: "campaign") }
            for _ in 0..<4 { log.record(Self.error500, app: "shop", lane: "campaign") }
            clock.advance(0.01)
        }
        #expect(log.outages().isEmpty)
        #expect(!sink.lines.contains { $0.contains("apns_down") }, "\(sink.lines)")
    }

    @Test func failuresWithoutAnAnswerForASecondAreAnOutageUntilASecondOfAnswers() {
        let (log, sink, clock) = Self.make()
        for _ in 0..<20 {
            log.record(.transportFailure("Could not connect to server"), app: "shop", lane: "transactional")
            clock.advance(0.1)
        }
        #expect(log.outages().map(\.app) == ["shop"])
        #expect(sink.lines.filter { $0.contains("apns_down") }.count == 1)
        // Answers again: back only after a second of them.
        log.record(Self.ok, app: "shop", lane: "transactional")
        clock.advance(0.5)
        log.record(Self.ok, app: "shop", lane: "transactional")
        #expect(log.outages().count == 1)
        clock.advance(0.6)
        log.record(Self.ok, app: "shop", lane: "transactional")
        #expect(log.outages().isEmpty)
        #expect(sink.lines.filter { $0.contains("apns_back") }.count == 1)
    }
}
