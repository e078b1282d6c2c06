import Locking

/// Which idle transactional worker watches the queue for new jobs.
///
/// Of the workers whose last claim came up empty, one (the watcher) polls or sleeps on
/// NOTIFY for everyone and the others rest without touching the database. When the
/// watcher's claim finds work it hands the watch to a resting worker before sending, so the
/// next job is claimed while this batch is in flight, and a burst wakes the workers one by
/// one as each finds more due. Four workers each polling the queue every 2 ms (a claim and
/// a probe, four round trips) kept a PostgreSQL backend busy most of a core on a 2-core host
/// while jobs trickled in, and that CPU was missing from the application's INSERTs, from
/// the claim itself and, during a campaign, from the drain.
///
/// The busy window (`JobWaitPolicy.busyWindow`) counts from the last claim of any worker
/// that found work.
///
/// Thread rule: every method may be called from any worker thread; the state sits in a
/// `Condition`.
final class IdleClaimers: @unchecked Sendable {
    struct State: Equatable {
        /// The worker watching the queue, if any.
        var watcher: Int?
        /// Idle workers waiting for the watch, oldest first.
        var resting: [Int] = []
        /// Monotonic seconds of the last claim that found work.
        var lastWork: Double

        /// `worker`'s claim came up empty: true when it watches the queue now (it already
        /// did, or nobody did), false when it must rest.
        mutating func becameIdle(_ worker: Int) -> Bool {
            if watcher == nil || watcher == worker {
                watcher = worker
                resting.removeAll { $0 == worker }
                return true
            }
            if !resting.contains(worker) { resting.append(worker) }
            return false
        }

        /// `worker`'s claim found work at `now`: if it was the watcher, the longest-resting
        /// worker takes the watch (nobody, when all are busy: the next to go idle takes it).
        mutating func foundWork(_ worker: Int, now: Double) {
            lastWork = max(lastWork, now)
            resting.removeAll { $0 == worker }
            if watcher == worker { watcher = resting.isEmpty ? nil : resting.removeFirst() }
        }

        /// `worker` stops (shutdown or a lost connection) and passes on the watch.
        mutating func left(_ worker: Int) {
            resting.removeAll { $0 == worker }
            if watcher == worker { watcher = resting.isEmpty ? nil : resting.removeFirst() }
        }

        /// Whether a resting `worker` should look at the queue again: it was given the watch.
        func shouldWake(_ worker: Int) -> Bool { watcher == worker }
    }

    private let state: Condition<State>

    init(lastWork: Double) {
        state = Condition(State(lastWork: lastWork))
    }

    var snapshot: State { state.withLock { $0 } }

    func becameIdle(_ worker: Int) -> Bool { state.withLock { $0.becameIdle(worker) } }

    func foundWork(_ worker: Int, now: Double) { state.update { $0.foundWork(worker, now: now) } }

    func left(_ worker: Int) { state.update { $0.left(worker) } }

    func idleSeconds(now: Double) -> Double { now - state.withLock { $0.lastWork } }

    /// Rests until `worker` is given the watch or `timeout` seconds pass; true when it was given it.
    /// After a time-out the worker claims once (jobs an aborted claim left behind, a missed
    /// hand-off) and comes back.
    func rest(_ worker: Int, timeout: Double) -> Bool {
        let woken = state.wait(timeout: timeout) { $0.shouldWake(worker) ? true : nil } ?? false
        if !woken { state.withLock { state in state.resting.removeAll { $0 == worker } } }
        return woken
    }
}
