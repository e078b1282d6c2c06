import Locking

/// The transactional workers' turns at probing the queue while the lane is busy.
///
/// Inserts notify only claimers registered as asleep (a NOTIFY serialises commits), so for a
/// second after any of them found work the workers look for jobs themselves. Each claiming and
/// probing on its own every 2 ms, four workers ran 2,100–2,500 transactions a second between
/// them while jobs trickled in, and during a campaign drain PostgreSQL's CPU per notification
/// was 17–23 µs instead of 3 (docs/queue.md). Now one worker holds the turn and probes (one
/// query) every poll interval, claiming only when jobs are due; the others wait here, in the
/// process, until it finds work, gives the turn up, or the lane's busy second ends. A worker
/// that finds work gives up the turn and calls one waiting worker, which claims at once (a
/// burst has more than one batch) while another takes the turn. The busy second is the
/// lane's: the last time any worker found work.
///
/// Thread rule: every transactional worker calls in from its own thread.
final class ClaimTurns: Sendable {
    enum Wait: Equatable {
        /// This worker holds the turn: it probes the queue now.
        case probe
        /// Another worker found work and called this one to claim.
        case called
        /// Neither came within the time given.
        case timedOut
    }

    private struct State {
        var prober: Int?
        /// Workers waiting here, and how many of them are called to claim.
        var waiting = 0
        var calls = 0
        var lastWork: Double
    }

    private let state: Condition<State>
    private let clock: @Sendable () -> Double

    init(busyWindow: Double, clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.clock = clock
        state = Condition(State(lastWork: clock() - busyWindow))
    }

    /// Seconds since any worker last found work.
    var idleSeconds: Double {
        let now = clock()
        return now - state.withLock { $0.lastWork }
    }

    /// Worker `index` found no work in the lane's busy second: `.probe` at once when the turn
    /// is free or its own, else waits up to `timeout` seconds to be called or to get the turn.
    func await(_ index: Int, timeout: Double) -> Wait {
        let taken = state.withLock { state -> Bool in
            if state.prober == nil { state.prober = index }
            if state.prober == index { return true }
            state.waiting += 1
            return false
        }
        if taken { return .probe }
        let outcome = state.wait(timeout: max(0, timeout)) { state -> Wait? in
            if state.calls > 0 {
                state.calls -= 1
                state.waiting -= 1
                return .called
            }
            if state.prober == nil {
                state.prober = index
                state.waiting -= 1
                return .probe
            }
            return nil
        }
        if let outcome { return outcome }
        state.withLock { state in
            state.waiting -= 1
            state.calls = min(state.calls, state.waiting)
        }
        return .timedOut
    }

    /// Worker `index` claimed a batch: the lane is busy, the turn is free for another worker,
    /// and one waiting worker is called to claim too.
    func foundWork(_ index: Int) {
        let now = clock()
        state.update { state in
            state.lastWork = max(state.lastWork, now)
            if state.prober == index { state.prober = nil }
            if state.calls < state.waiting { state.calls += 1 }
        }
    }

    /// Worker `index` leaves the busy lane (to sleep until an insert notifies, or to stop, or
    /// after a database error): its turn goes to a waiting worker.
    func leave(_ index: Int) {
        let held = state.withLock { $0.prober == index }
        guard held else { return }
        state.update { state in
            if state.prober == index { state.prober = nil }
        }
    }
}
