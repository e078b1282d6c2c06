#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value shared between threads, reached only inside `withLock`: the project's
/// replacement for `Synchronization.Mutex`, with the same shape (`Lock(initial)`,
/// `withLock { value in … }`).
///
/// Why not `Mutex`: on Linux the toolchain's `Mutex` parks on a futex directly, which
/// ThreadSanitizer does not model, so every access made under it is reported as a race
/// and a real race cannot be told from those. A pthread mutex is intercepted by
/// ThreadSanitizer, so it knows the order the lock gives; uncontended it costs the same
/// (Benchmarks/MetricsBench prints both).
///
/// The value and the mutex live in memory of their own that never moves (a pthread mutex
/// must not be copied), allocated once in `init`; neither pointer leaves this type. The
/// value is reached through a pointer rather than a stored property so that `withLock`
/// pays no dynamic exclusivity check: the mutex already gives exclusive access.
public final class Lock<Value>: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    public init(_ initial: consuming Value) {
        mutex = .allocate(capacity: 1)
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = .allocate(capacity: 1)
        value.initialize(to: initial)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value while holding the lock. A failure to lock or unlock a
    /// default pthread mutex can only be a bug (a destroyed or corrupted mutex), so it
    /// stops the process rather than touch the value unlocked.
    @inlinable
    public func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        let locked = pthread_mutex_lock(mutex)
        precondition(locked == 0, "pthread_mutex_lock failed: \(locked)")
        defer {
            let unlocked = pthread_mutex_unlock(mutex)
            precondition(unlocked == 0, "pthread_mutex_unlock failed: \(unlocked)")
        }
        return try body(&value.pointee)
    }
}
