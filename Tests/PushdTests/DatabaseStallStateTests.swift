import QueueStore
import Testing
@testable import pushd

/// When the database counts as stalled and when as answering again, with a hand-made clock.
@Suite struct DatabaseStallStateTests {
    let start = ContinuousClock.now

    @Test func aCallOverTheLimitIsOneStallEvent() {
        var state = DatabaseStallState(limit: .seconds(10))
        let call = PGCall(purpose: "pushd-jobs-0", waited: .seconds(11))
        #expect(state.observe(calls: [PGCall(purpose: "pushd-stats", waited: .seconds(9))], lastAnswer: nil, now: start) == nil)
        #expect(state.observe(calls: [PGCall(purpose: "pushd-stats", waited: .seconds(3)), call], lastAnswer: nil, now: start) == .stalled(call))
        #expect(state.isStalled)
        // Still waiting, or answered before the stall was seen: nothing new.
        #expect(state.observe(calls: [call], lastAnswer: start + .seconds(1), now: start + .seconds(1)) == nil)
        #expect(state.observe(calls: [], lastAnswer: start - .seconds(1), now: start + .seconds(2)) == nil)
    }

    @Test func anAnswerAfterTheStallEndsItWithItsLength() {
        var state = DatabaseStallState(limit: .seconds(10))
        _ = state.observe(calls: [PGCall(purpose: "pushd-stats", waited: .seconds(12))], lastAnswer: nil, now: start)
        // A call answered, but another one is still over the limit.
        #expect(state.observe(calls: [PGCall(purpose: "pushd-jobs-1", waited: .seconds(11))],
                              lastAnswer: start + .seconds(3), now: start + .seconds(4)) == nil)
        #expect(state.observe(calls: [PGCall(purpose: "pushd-jobs-1", waited: .seconds(1))],
                              lastAnswer: start + .seconds(5), now: start + .seconds(8)) == .recovered(after: .seconds(20)))
        #expect(!state.isStalled)
    }
}
