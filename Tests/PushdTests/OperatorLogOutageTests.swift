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
            for _ in 0..<196 { log.record(Self.ok, app: "shop", environment: "production", lane: "campaign") }
            for _ in 0..<4 { log.record(Self.error500, app: "shop", environment: "production", lane: "campaign") }
            clock.advance(0.01)
        }
        #expect(log.outages().isEmpty)
        #expect(!sink.lines.contains { $0.contains("apns_down") }, "\(sink.lines)")
    }

    /// 2 % of APNs's answers are 500 for minutes: no outage, so the summary is the only line,
    /// and it is a warning that names the server errors first, once per interval; retries
    /// that are not APNs failing (429 for one device, a lost stream) leave it at info.
    @Test func aShareOfServerErrorsTooSmallForAnOutageIsAWarningOncePerSummary() throws {
        let sink = MemoryLogSink()
        let clock = Clock()
        let log = OperatorLog(logger: Logger(level: .info, sink: sink), summaryInterval: 60, clock: { clock.now.withLock { $0 } })
        for _ in 0..<120 {
            for _ in 0..<49 { log.record(Self.ok, app: "shop", environment: "production", lane: "campaign") }
            log.record(Self.error500, app: "shop", environment: "production", lane: "campaign")
            log.retried(Self.error500)
            clock.advance(1)
        }
        log.tick()
        let summaries = sink.lines.filter { $0.contains(#""event":"summary""#) }
        #expect(summaries.count == 2, "\(sink.lines)")
        for line in summaries {
            #expect(line.contains(#""level":"warning""#) && line.contains("APNs answered a server error (5xx) to 60 sends (InternalServerError=60)")
                    && line.contains(#""server_errors":60"#), "\(line)")
        }
        #expect(!sink.lines.contains { $0.contains("apns_down") })

        let quiet = MemoryLogSink()
        let other = OperatorLog(logger: Logger(level: .info, sink: quiet), summaryInterval: 60, clock: { clock.now.withLock { $0 } })
        other.retried(.response(APNsResponse(status: 429, reason: .tooManyRequests)))
        other.retried(.transportFailure("Recv failure: Connection reset by peer"))
        clock.advance(61)
        other.tick()
        #expect(quiet.lines.count == 1 && quiet.lines[0].contains(#""level":"info""#) && quiet.lines[0].contains(#""server_errors":0"#), "\(quiet.lines)")
        other.deadLettered(reason: "PayloadTooLarge")
        clock.advance(61)
        other.tick()
        #expect(quiet.lines.count == 2 && quiet.lines[1].contains(#""level":"warning""#)
                && quiet.lines[1].contains("1 notifications given up for good (PayloadTooLarge=1)"), "\(quiet.lines)")
        // A 5xx without a documented reason (a proxy's 502, an empty body) is a server error too.
        other.record(.response(APNsResponse(status: 502)), app: "shop", environment: "production", lane: "campaign")
        other.retried(.response(APNsResponse(status: 502)))
        clock.advance(61)
        other.tick()
        #expect(quiet.lines.count == 3 && quiet.lines[2].contains(#""level":"warning""#)
                && quiet.lines[2].contains("APNs answered a server error (5xx) to 1 sends (none=1)"), "\(quiet.lines)")
    }

    /// APNs answers 503 to everything for ten minutes: the outage has its own lines (down,
    /// still down, back), and what it holds is kept until the lane is back, not retried after a
    /// backoff; the summaries meanwhile do not warn of the same 5xx answers again, each interval,
    /// as if they were a share of answers too small for an outage.
    @Test func theServerErrorsOfADeclaredOutageAreNotToldAgainInTheSummary() throws {
        let sink = MemoryLogSink()
        let clock = Clock()
        let log = OperatorLog(logger: Logger(level: .info, sink: sink), summaryInterval: 60, clock: { clock.now.withLock { $0 } })
        let unavailable = SendOutcome.response(APNsResponse(status: 503, reason: .serviceUnavailable))
        for _ in 0..<600 {
            log.record(unavailable, app: "shop", environment: "production", lane: "transactional")
            log.retried(unavailable)
            clock.advance(1)
        }
        log.tick()
        #expect(sink.lines.filter { $0.contains("apns_down") }.count == 1, "\(sink.lines)")
        let summaries = sink.lines.filter { $0.contains(#""event":"summary""#) }
        #expect(summaries.count == 10, "\(sink.lines)")
        // The answers before the outage was declared (failures in a row for a second) went through.
        #expect(summaries[0].contains("APNs answered a server error (5xx) to 2 sends (ServiceUnavailable=2)"), "\(summaries[0])")
        for line in summaries.dropFirst() {
            #expect(!line.contains("server error") && line.contains(#""server_errors":0"#) && line.contains(#""level":"info""#), "\(line)")
        }
    }

    @Test func failuresWithoutAnAnswerForASecondAreAnOutageUntilASecondOfAnswers() {
        let (log, sink, clock) = Self.make()
        for _ in 0..<20 {
            log.record(.transportFailure("Could not connect to server"), app: "shop", environment: "production", lane: "transactional")
            clock.advance(0.1)
        }
        #expect(log.outages().map(\.app) == ["shop"])
        #expect(log.isDown(app: "shop", environment: "production", lane: "transactional"))
        #expect(!log.isDown(app: "shop", environment: "sandbox", lane: "transactional"))
        #expect(!log.isDown(app: "shop", environment: "production", lane: "campaign"))
        #expect(sink.lines.filter { $0.contains("apns_down") }.count == 1)
        // Answers again: back only after a second of them.
        log.record(Self.ok, app: "shop", environment: "production", lane: "transactional")
        clock.advance(0.5)
        log.record(Self.ok, app: "shop", environment: "production", lane: "transactional")
        #expect(log.outages().count == 1)
        // Not back yet, but answering: sending resumes, and the lane's probe comes again soon.
        #expect(!log.isDown(app: "shop", environment: "production", lane: "transactional"))
        #expect(log.isAnswering(lane: "transactional") && !log.isAnswering(lane: "campaign"))
        clock.advance(0.6)
        log.record(Self.ok, app: "shop", environment: "production", lane: "transactional")
        #expect(log.outages().isEmpty)
        #expect(!log.isDown(app: "shop", environment: "production", lane: "transactional"))
        #expect(!log.isAnswering(lane: "transactional"))
        #expect(sink.lines.filter { $0.contains("apns_back") }.count == 1)
    }

    /// Apple's sandbox and production hosts fail apart: a sandbox outage is sandbox's, whatever
    /// production answers meanwhile.
    @Test func eachEnvironmentHasItsOwnOutage() {
        let (log, sink, clock) = Self.make()
        // Sandbox answers nothing for 2 s while production answers everything, interleaved.
        for _ in 0..<20 {
            log.record(.transportFailure("Could not connect to server"), app: "shop", environment: "sandbox", lane: "transactional")
            log.record(Self.ok, app: "shop", environment: "production", lane: "transactional")
            clock.advance(0.1)
        }
        #expect(log.outages().map { "\($0.app) \($0.environment) \($0.lane)" } == ["shop sandbox transactional"])
        #expect(log.appsDown(lane: "transactional") == [OperatorLog.Target(app: "shop", environment: "sandbox")])
        #expect(log.appsDown(lane: "campaign").isEmpty)
        let down = sink.lines.filter { $0.contains("apns_down") }
        #expect(down.count == 1 && down[0].contains("sandbox") && !down[0].contains("production"), "\(down)")
        // Production's answers for 3 s do not end it.
        for _ in 0..<30 {
            log.record(Self.ok, app: "shop", environment: "production", lane: "transactional")
            clock.advance(0.1)
        }
        log.tick()
        #expect(log.outages().count == 1)
        #expect(log.takeAppsBack(lane: "transactional").isEmpty)
        // Production down too, then sandbox back: each comes back on its own.
        for _ in 0..<12 {
            log.record(Self.error500, app: "shop", environment: "production", lane: "transactional")
            log.record(.transportFailure("Could not connect to server"), app: "shop", environment: "sandbox", lane: "transactional")
            clock.advance(0.1)
        }
        #expect(log.outages().map(\.environment) == ["production", "sandbox"])
        for _ in 0..<12 {
            log.record(Self.ok, app: "shop", environment: "sandbox", lane: "transactional")
            log.record(Self.error500, app: "shop", environment: "production", lane: "transactional")
            clock.advance(0.1)
        }
        #expect(log.outages().map(\.environment) == ["production"])
        let back = log.takeAppsBack(lane: "transactional")
        #expect(back == [OperatorLog.Target(app: "shop", environment: "sandbox")])
        #expect(log.takeAppsBack(lane: "transactional").isEmpty)
        // Given back after a database error, it is taken again, with its environment.
        log.returnAppsBack(back, lane: "transactional")
        #expect(log.takeAppsBack(lane: "transactional") == back)
        let backLines = sink.lines.filter { $0.contains("apns_back") }
        #expect(backLines.count == 1 && backLines[0].contains("\"environment\":\"sandbox\""), "\(backLines)")
    }
}
