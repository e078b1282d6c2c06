import APNs
import Foundation
import Locking
import Testing
@testable import pushd

/// APNs's 429 TooManyRequests is about one device token; when most of a lane's answers are 429
/// APNs is throttling the provider: one warning, `throttledLanes` (which `/readyz` and
/// `pushd status` show), and one notice when answers go through again.
@Suite struct OperatorLogThrottlingTests {
    static let ok = SendOutcome.response(APNsResponse(status: 200))
    static let throttled = SendOutcome.response(APNsResponse(status: 429, reason: .tooManyRequests))
    static let tokenUpdates = SendOutcome.response(APNsResponse(status: 429, reason: .tooManyProviderTokenUpdates))

    static func lines(_ sink: MemoryLogSink, _ event: String) -> [String] {
        sink.lines.filter { $0.contains("\"event\":\"\(event)\"") }
    }

    @Test func mostAnswers429ForAWindowThrottleTheLaneUntilAnswersComeWithoutOne() {
        let (log, sink, clock) = OperatorLogOutageTests.make()
        // 10 answers a second, 9 of them 429, for 12 s.
        for _ in 0..<120 {
            for _ in 0..<9 { log.record(Self.throttled, app: "shop", environment: "production", lane: "campaign") }
            log.record(Self.ok, app: "shop", environment: "production", lane: "campaign")
            clock.advance(0.1)
        }
        #expect(log.throttledLanes().map { "\($0.app) \($0.environment) \($0.lane)" } == ["shop production campaign"])
        #expect(log.throttledLanes().first?.error.contains("HTTP 429 TooManyRequests to 9") == true, "\(log.throttledLanes())")
        // Sending goes on: every throttled notification waits out its own backoff.
        #expect(!log.isDown(app: "shop", environment: "production", lane: "campaign"))
        #expect(log.outages().isEmpty)
        let warnings = Self.lines(sink, "apns_throttling")
        #expect(warnings.count == 1 && warnings[0].contains("\"level\":\"warning\"") && warnings[0].contains("throttling this provider"), "\(warnings)")
        // Other environments and lanes are not throttled by it.
        log.record(Self.ok, app: "shop", environment: "sandbox", lane: "campaign")
        #expect(log.throttledLanes().count == 1)
        // Answers without a 429 for a second end it, once.
        for _ in 0..<12 {
            log.record(Self.ok, app: "shop", environment: "production", lane: "campaign")
            clock.advance(0.1)
        }
        #expect(log.throttledLanes().isEmpty)
        let over = Self.lines(sink, "apns_throttling_over")
        #expect(over.count == 1 && over[0].contains("\"level\":\"notice\""), "\(over)")
        #expect(Self.lines(sink, "apns_throttling").count == 1)
        // The 429s of the window it ended in are not judged again once that window is over.
        for _ in 0..<100 {
            log.record(Self.ok, app: "shop", environment: "production", lane: "campaign")
            clock.advance(0.1)
        }
        log.tick()
        #expect(log.throttledLanes().isEmpty)
        #expect(Self.lines(sink, "apns_throttling").count == 1, "\(Self.lines(sink, "apns_throttling"))")
    }

    /// 429s for a few devices among many answers are what Apple's 429 means: no line.
    @Test func a429ForSomeDevicesAmongManyAnswersIsNoThrottling() {
        let (log, sink, clock) = OperatorLogOutageTests.make()
        // 100 answers a second for 30 s, 3 of them 429 (300 a window, well above the minimum count).
        for _ in 0..<300 {
            for _ in 0..<3 { log.record(Self.throttled, app: "shop", environment: "production", lane: "transactional") }
            for _ in 0..<7 { log.record(Self.ok, app: "shop", environment: "production", lane: "transactional") }
            clock.advance(0.1)
        }
        #expect(log.throttledLanes().isEmpty)
        #expect(Self.lines(sink, "apns_throttling").isEmpty)
    }

    /// A few answers, all 429, are a few devices: under 20 in a window, no line.
    @Test func fewerThanTwenty429sInAWindowAreNoThrottling() {
        let (log, sink, clock) = OperatorLogOutageTests.make()
        for _ in 0..<40 {
            log.record(Self.throttled, app: "shop", environment: "production", lane: "transactional")
            clock.advance(0.6)
        }
        #expect(log.throttledLanes().isEmpty)
        #expect(Self.lines(sink, "apns_throttling").isEmpty)
    }

    /// 429 TooManyProviderTokenUpdates is about the connection's token, not throttling.
    @Test func tooManyProviderTokenUpdatesIsNotThrottling() {
        let (log, sink, clock) = OperatorLogOutageTests.make()
        for _ in 0..<200 {
            log.record(Self.tokenUpdates, app: "shop", environment: "production", lane: "campaign")
            clock.advance(0.1)
        }
        #expect(log.throttledLanes().isEmpty)
        #expect(Self.lines(sink, "apns_throttling").isEmpty)
    }

    /// A throttled lane whose work stops being answered (all of it waiting, or gone) is no
    /// longer called throttled after a minute of silence, on the workers' ticks.
    @Test func aThrottledLaneWithNoAnswerForAMinuteIsNoLongerThrottled() {
        let (log, sink, clock) = OperatorLogOutageTests.make()
        for _ in 0..<110 {
            for _ in 0..<5 { log.record(Self.throttled, app: "shop", environment: "sandbox", lane: "transactional") }
            clock.advance(0.1)
        }
        #expect(log.throttledLanes().count == 1)
        clock.advance(30)
        log.tick()
        #expect(log.throttledLanes().count == 1)
        clock.advance(35)
        log.tick()
        #expect(log.throttledLanes().isEmpty)
        let over = Self.lines(sink, "apns_throttling_over")
        #expect(over.count == 1 && over[0].contains("no notification was answered"), "\(over)")
    }
}
