import Locking
import Posix
import Testing
@testable import pushd

/// The transactional workers' turns at probing the queue: one probes, the others wait until it
/// finds work (then one is called to claim and another takes the turn) or leaves.
@Suite struct ClaimTurnsTests {
    final class Clock: Sendable {
        let now = Lock<Double>(100)
        func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
    }

    /// Runs `await` of worker `index` on a thread of its own; the result arrives in the box.
    private func awaitInBackground(_ turns: ClaimTurns, _ index: Int, timeout: Double) -> (Locking.Semaphore, Lock<ClaimTurns.Wait?>) {
        let done = Locking.Semaphore()
        let result = Lock<ClaimTurns.Wait?>(nil)
        PosixThread.detach(name: "turns-\(index)") {
            let wait = turns.await(index, timeout: timeout)
            result.withLock { $0 = wait }
            done.signal()
        }
        return (done, result)
    }

    @Test func theFirstWorkerProbesAndKeepsTheTurnTheOthersTimeOutWithoutIt() {
        let turns = ClaimTurns(busyWindow: 1)
        #expect(turns.await(0, timeout: 1) == .probe)
        #expect(turns.await(0, timeout: 1) == .probe, "the prober keeps its turn")
        let started = RateLimiter.monotonicSeconds()
        #expect(turns.await(1, timeout: 0.2) == .timedOut)
        #expect(RateLimiter.monotonicSeconds() - started >= 0.19)
        #expect(turns.await(0, timeout: 1) == .probe)
    }

    @Test func aWorkerThatFindsWorkCallsAWaitingOneAndTheTurnGoesToAnother() {
        let turns = ClaimTurns(busyWindow: 1)
        #expect(turns.await(0, timeout: 1) == .probe)
        let (firstDone, first) = awaitInBackground(turns, 1, timeout: 10)
        let (secondDone, second) = awaitInBackground(turns, 2, timeout: 10)
        PosixThread.sleep(seconds: 0.2)
        #expect(first.withLock { $0 } == nil && second.withLock { $0 } == nil, "both wait while worker 0 probes")
        turns.foundWork(0)
        #expect(firstDone.wait(timeout: 5) && secondDone.wait(timeout: 5))
        let results: [ClaimTurns.Wait?] = [first.withLock { $0 }, second.withLock { $0 }]
        #expect(results.contains(ClaimTurns.Wait.called) && results.contains(ClaimTurns.Wait.probe), "\(results)")
        // Worker 0, back from its batch, waits on the new prober.
        #expect(turns.await(0, timeout: 0.05) == .timedOut)
    }

    @Test func aProberThatLeavesHandsTheTurnToAWaitingWorker() {
        let turns = ClaimTurns(busyWindow: 1)
        #expect(turns.await(3, timeout: 1) == .probe)
        let (done, result) = awaitInBackground(turns, 1, timeout: 10)
        PosixThread.sleep(seconds: 0.1)
        turns.leave(3)
        #expect(done.wait(timeout: 5))
        #expect(result.withLock { $0 } == .probe)
        turns.leave(3)
        #expect(turns.await(3, timeout: 0.05) == .timedOut, "leaving without the turn takes nothing from its holder")
    }

    @Test func workFoundWithNobodyWaitingCallsNobodyLater() {
        let turns = ClaimTurns(busyWindow: 1)
        #expect(turns.await(0, timeout: 1) == .probe)
        turns.foundWork(0)
        turns.foundWork(0)
        #expect(turns.await(1, timeout: 1) == .probe, "the free turn, not a stale call")
        #expect(turns.await(2, timeout: 0.05) == .timedOut)
    }

    @Test func theLanesBusySecondIsTheLastWorkOfAnyWorker() {
        let clock = Clock()
        let turns = ClaimTurns(busyWindow: 1, clock: { clock.now.withLock { $0 } })
        #expect(turns.idleSeconds == 1)
        clock.advance(5)
        turns.foundWork(2)
        #expect(turns.idleSeconds == 0)
        clock.advance(0.4)
        #expect(abs(turns.idleSeconds - 0.4) < 1e-9)
    }
}
