@testable import Dispatcher
import Testing

/// `AnswerCoalescing`: when a loop pauses before reading its sockets again, and for how long.
/// Plain values, no sockets.
@Suite struct AnswerCoalescingTests {
    private static let ms: UInt64 = 1_000_000

    /// Up to 25 ms, from 100 requests in flight, with a round trip of 150 ms learnt.
    private func far() -> AnswerCoalescing {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 25, minimumInFlight: 100)
        coalescing.answered(after: 150 * Self.ms)
        return coalescing
    }

    @Test func aThinReadAtALongRoundTripPausesUntilTheMaximumAfterIt() {
        var coalescing = far()
        // 10 of 500 in flight answered: a thin read.
        coalescing.socketsRead(at: 1000 * Self.ms, answers: 10, inFlight: 500)
        #expect(coalescing.pause(now: 1000 * Self.ms, inFlight: 490) == 25 * Self.ms)
        #expect(coalescing.pause(now: 1010 * Self.ms, inFlight: 490) == 15 * Self.ms)
        #expect(coalescing.pause(now: 1025 * Self.ms, inFlight: 490) == 0)
    }

    @Test func theGapIsAQuarterOfTheRoundTripBelowTheMaximum() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 25, minimumInFlight: 100)
        coalescing.answered(after: 40 * Self.ms)
        coalescing.socketsRead(at: 0, answers: 1, inFlight: 400)
        #expect(coalescing.gap == 10 * Self.ms)
        #expect(coalescing.pause(now: 2 * Self.ms, inFlight: 400) == 8 * Self.ms)
    }

    @Test func aFullReadAsOnLoopbackNeverPauses() {
        var coalescing = far()
        // 100 of 500 answered at once: the loop is busy or the server near; reading again at
        // once costs libcurl no more per answer.
        coalescing.socketsRead(at: 0, answers: 100, inFlight: 500)
        #expect(coalescing.pause(now: 1 * Self.ms, inFlight: 400) == 0)
    }

    @Test func fewRequestsInFlightAreReadAtOnce() {
        var coalescing = far()
        coalescing.socketsRead(at: 0, answers: 1, inFlight: 99)
        #expect(coalescing.pause(now: 0, inFlight: 98) == 0)
    }

    @Test func zeroMillisecondsTurnsItOff() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 0, minimumInFlight: 1)
        coalescing.answered(after: 150 * Self.ms)
        coalescing.socketsRead(at: 0, answers: 1, inFlight: 1000)
        #expect(!coalescing.enabled)
        #expect(coalescing.pause(now: 0, inFlight: 1000) == 0)
    }

    @Test func beforeAnyAnswerTheLoopReadsAtOnce() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 25, minimumInFlight: 1)
        coalescing.socketsRead(at: 0, answers: 0, inFlight: 1000)
        #expect(coalescing.pause(now: 0, inFlight: 1000) == 0)
    }

    @Test func theRoundTripFollowsAnswersSmoothly() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 50, minimumInFlight: 1)
        coalescing.answered(after: 160 * Self.ms)
        #expect(coalescing.roundTrip == 160 * Self.ms)
        // One answer 16 ms later moves it by a sixteenth of the difference, either way.
        coalescing.answered(after: 176 * Self.ms)
        #expect(coalescing.roundTrip == 161 * Self.ms)
        coalescing.answered(after: 145 * Self.ms)
        #expect(coalescing.roundTrip == 160 * Self.ms)
    }
}
