import Glibc
import Synchronization

/// The bounded in-flight window: `acquire` takes a slot (waiting while none is free),
/// `release` returns finished ones in batches.
///
/// Unlike a semaphore signalled per completion, a blocked submitter is woken only once a
/// useful number of slots (`wakeThreshold`) is free, so a full window costs one wake-up per
/// batch instead of a context switch per request.
///
/// Thread rule: any thread; the mutex and condition variable guard only the sleep, the slot
/// count is an atomic.
final class WindowGate: @unchecked Sendable {
    private let available: Atomic<Int>
    private let sleepers = Atomic<Int>(0)
    private let wakeThreshold: Int
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init(capacity: Int) {
        available = Atomic(capacity)
        wakeThreshold = max(1, capacity / 4)
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        condition.deallocate()
    }

    func tryAcquire() -> Bool {
        var current = available.load(ordering: .sequentiallyConsistent)
        while current > 0 {
            let (exchanged, original) = available.compareExchange(expected: current, desired: current - 1, ordering: .sequentiallyConsistent)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Takes between 1 and `wanted` slots, as many as are free, waiting while none is.
    func acquire(upTo wanted: Int) -> Int {
        if let taken = tryAcquire(upTo: wanted) { return taken }
        pthread_mutex_lock(mutex)
        sleepers.add(1, ordering: .sequentiallyConsistent)
        var taken = tryAcquire(upTo: wanted)
        while taken == nil {
            pthread_cond_wait(condition, mutex)
            taken = tryAcquire(upTo: wanted)
        }
        sleepers.subtract(1, ordering: .sequentiallyConsistent)
        pthread_mutex_unlock(mutex)
        return taken!
    }

    private func tryAcquire(upTo wanted: Int) -> Int? {
        var current = available.load(ordering: .sequentiallyConsistent)
        while current > 0 {
            let taking = min(current, max(1, wanted))
            let (exchanged, original) = available.compareExchange(expected: current, desired: current - taking, ordering: .sequentiallyConsistent)
            if exchanged { return taking }
            current = original
        }
        return nil
    }

    func acquire() {
        if tryAcquire() { return }
        pthread_mutex_lock(mutex)
        sleepers.add(1, ordering: .sequentiallyConsistent)
        while !tryAcquire() {
            pthread_cond_wait(condition, mutex)
        }
        sleepers.subtract(1, ordering: .sequentiallyConsistent)
        pthread_mutex_unlock(mutex)
    }

    func release(_ count: Int) {
        guard count > 0 else { return }
        let now = available.add(count, ordering: .sequentiallyConsistent).newValue
        if now >= wakeThreshold, sleepers.load(ordering: .sequentiallyConsistent) > 0 {
            // A sleeper looks at the count and starts waiting while it holds the mutex, so once
            // this thread has passed through the mutex every sleeper that missed the slots
            // added above is waiting on the condition, and the broadcast reaches it. Broadcast
            // after unlocking: broadcast under the mutex, the woken submitter found it still
            // held and slept a second time to take it (57-99 % of wake-ups, `perf` sched_switch
            // at 1 x 100; docs/dispatcher-measurements.md, "The hand-over to the loop").
            pthread_mutex_lock(mutex)
            pthread_mutex_unlock(mutex)
            pthread_cond_broadcast(condition)
        }
    }
}
