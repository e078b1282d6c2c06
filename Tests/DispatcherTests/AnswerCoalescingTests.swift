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
        // The loop waited 900 of the 1,000 ms before it, and 10 of 500 in flight were answered.
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 900 * Self.ms, answers: 10, inFlight: 500)
        #expect(coalescing.pause(now: 1000 * Self.ms, inFlight: 490) == 25 * Self.ms)
        #expect(coalescing.pause(now: 1010 * Self.ms, inFlight: 490) == 15 * Self.ms)
        #expect(coalescing.pause(now: 1025 * Self.ms, inFlight: 490) == 0)
    }

    @Test func theGapIsAQuarterOfTheRoundTripBelowTheMaximum() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 25, minimumInFlight: 100)
        coalescing.answered(after: 40 * Self.ms)
        coalescing.socketsRead(at: 100 * Self.ms, waited: 80 * Self.ms, answers: 1, inFlight: 400)
        #expect(coalescing.gap == 10 * Self.ms)
        #expect(coalescing.pause(now: 102 * Self.ms, inFlight: 400) == 8 * Self.ms)
    }

    @Test func aReadBringingMostOfWhatIsInFlightIsFollowedAtOnce() {
        var coalescing = far()
        // 300 of 500 answered at once: reading again at once costs libcurl no more per answer.
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 900 * Self.ms, answers: 300, inFlight: 500)
        #expect(coalescing.pause(now: 1001 * Self.ms, inFlight: 200) == 0)
    }

    @Test func aLoopBusyAllAlongNeverPausesForItsCPUSetsThePace() {
        var coalescing = far()
        // Loopback under load: a thin read, but the loop waited 10 of the 1,000 ms before it.
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 10 * Self.ms, answers: 10, inFlight: 500)
        #expect(coalescing.pause(now: 1001 * Self.ms, inFlight: 490) == 0)
    }

    @Test func aPauseCountsAsWaitingSoTheNextReadPausesAgain() {
        var coalescing = far()
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 900 * Self.ms, answers: 10, inFlight: 500)
        // The loop paused 25 ms and read 80 answers: still under half, still waiting for answers.
        coalescing.socketsRead(at: 1026 * Self.ms, waited: 25 * Self.ms, answers: 80, inFlight: 560)
        #expect(coalescing.pause(now: 1026 * Self.ms, inFlight: 480) == 25 * Self.ms)
    }

    @Test func fewRequestsInFlightAreReadAtOnce() {
        var coalescing = far()
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 900 * Self.ms, answers: 1, inFlight: 99)
        #expect(coalescing.pause(now: 1000 * Self.ms, inFlight: 98) == 0)
    }

    @Test func zeroMillisecondsTurnsItOff() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 0, minimumInFlight: 1)
        coalescing.answered(after: 150 * Self.ms)
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 900 * Self.ms, answers: 1, inFlight: 1000)
        #expect(!coalescing.enabled)
        #expect(coalescing.pause(now: 1000 * Self.ms, inFlight: 1000) == 0)
    }

    @Test func beforeAnyAnswerTheLoopReadsAtOnce() {
        var coalescing = AnswerCoalescing(maximumPauseMilliseconds: 25, minimumInFlight: 1)
        coalescing.socketsRead(at: 1000 * Self.ms, waited: 900 * Self.ms, answers: 0, inFlight: 1000)
        #expect(coalescing.pause(now: 1000 * Self.ms, inFlight: 1000) == 0)
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
