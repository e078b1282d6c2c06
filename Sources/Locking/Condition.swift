#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value shared between threads, like `Lock`, that threads can also wait on until it says
/// what they wait for: a pthread mutex and condition variable in place of Foundation's
/// `NSCondition`, with the predicate loop written once here rather than at every waiter.
///
/// Deadlines are measured on CLOCK_MONOTONIC, so a wall-clock step does not shorten or
/// stretch a wait. The mutex, the condition and the value live in memory that never moves.
public final class Condition<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private let value: UnsafeMutablePointer<Value>

    public init(_ initial: consuming Value) {
        mutex = .allocate(capacity: 1)
        precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
        condition = .allocate(capacity: 1)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(pthread_cond_init(condition, &attributes) == 0, "pthread_cond_init failed")
        pthread_condattr_destroy(&attributes)
        value = .allocate(capacity: 1)
        value.initialize(to: initial)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value under the lock, then wakes every waiter to look again.
    ///
    /// The wake-up comes after the mutex is let go: a waiter woken while it is held finds it
    /// taken and sleeps a second time to get it (a waiter looks at the value only under the
    /// mutex, so one that looked before the update is already waiting on the condition when
    /// the broadcast comes, and one that looks after sees the update).
    public func update<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock()
        defer {
            unlock()
            pthread_cond_broadcast(condition)
        }
        return try body(&value.pointee)
    }

    /// Runs `body` with the value under the lock and wakes nobody: for reads.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body(&value.pointee)
    }

    /// Waits until `ready` returns a result (it runs under the lock, first at once and then
    /// after every `update`) or, with a timeout, until `timeout` seconds have passed: then nil.
    public func wait<Result>(timeout: Double? = nil, until ready: (inout Value) throws -> Result?) rethrows -> Result? {
        let deadline = timeout.map(Self.deadline(after:))
        lock()
        defer { unlock() }
        while true {
            if let result = try ready(&value.pointee) { return result }
            if var deadline {
                if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT {
                    return try ready(&value.pointee)
                }
            } else {
                pthread_cond_wait(condition, mutex)
            }
        }
    }

    private func lock() {
        let locked = pthread_mutex_lock(mutex)
        precondition(locked == 0, "pthread_mutex_lock failed: \(locked)")
    }

    private func unlock() {
        let unlocked = pthread_mutex_unlock(mutex)
        precondition(unlocked == 0, "pthread_mutex_unlock failed: \(unlocked)")
    }

    private static func deadline(after seconds: Double) -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let total = Double(now.tv_sec) + Double(now.tv_nsec) / 1_000_000_000 + max(0, seconds)
        let whole = total.rounded(.down)
        return timespec(tv_sec: Int(whole), tv_nsec: Int((total - whole) * 1_000_000_000))
    }
}
