#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Gives each thread a small number, assigned round-robin the first time the thread
/// asks, so that threads updating the same histogram write to different cache lines.
/// The number only spreads load: any thread may use any stripe, since every cell is
/// still updated atomically.
struct ThreadStripe: Sendable {
    /// Copied into each histogram so that the hot path does not go through the lazy
    /// initialisation check of a global.
    static let shared = ThreadStripe()
    private static let nextNumber = Atomic<UInt>(0)
    private let key: pthread_key_t?

    private init() {
        var key = pthread_key_t()
        self.key = pthread_key_create(&key, nil) == 0 ? key : nil
    }

    /// This thread's number (0, 1, 2, … in order of first use; all threads share 0 if the
    /// process ran out of thread-specific keys).
    func current() -> UInt {
        guard let key else { return 0 }
        // Stored plus one, since a thread that never asked reads back nil.
        if let stored = pthread_getspecific(key) {
            return UInt(bitPattern: Int(bitPattern: stored)) &- 1
        }
        let number = ThreadStripe.nextNumber.wrappingAdd(1, ordering: .relaxed).oldValue
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: number &+ 1))
        return number
    }

    /// Stripes per histogram series: a power of two, at least 4 (so a few threads rarely
    /// share one) and at most 16 (so a series stays a couple of kilobytes).
    static let stripeCount: Int = {
        let processors = max(sysconf(Int32(_SC_NPROCESSORS_ONLN)), 1)
        var count = 4
        while count < processors && count < 16 { count *= 2 }
        return count
    }()
}
