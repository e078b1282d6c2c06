import Posix
import Glibc
import Locking

/// Spaces out sends per campaign to its rate cap (notifications per second), shared by
/// every campaign worker of this process. A short burst (20 ms worth) makes up for sleeps
/// that overshoot, so the pipeline never runs dry between reservations. It is kept short
/// because several instances take turns on one campaign's chunks (the lease schedule paces
/// them together): every burst at a chunk's start crowds the previous chunk's last sends.
final class RateLimiter: Sendable {
    private let schedule = Lock<[Int64: Double]>([:])
    /// Seconds of sending a campaign that fell behind its schedule may make up at once.
    static let burstSeconds = 0.02

    /// Reserves one send for `campaign` and returns how long to wait before making it.
    func reserve(campaign: Int64, rate: Int, now: Double = RateLimiter.monotonicSeconds()) -> Double {
        guard rate > 0 else { return 0 }
        let interval = 1 / Double(rate)
        let burst = max(interval, Self.burstSeconds)
        return schedule.withLock { schedule -> Double in
            let earliest = max(schedule[campaign] ?? now, now - burst)
            schedule[campaign] = earliest + interval
            return max(0, earliest - now)
        }
    }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
