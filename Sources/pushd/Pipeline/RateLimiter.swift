import Foundation
import Synchronization

/// Spaces out sends per campaign to its rate cap (notifications per second), shared by
/// every campaign worker of this process. A short burst (a tenth of a second's worth)
/// is allowed so the pipeline never runs dry between reservations.
final class RateLimiter: Sendable {
    private let schedule = Mutex<[Int64: Double]>([:])

    /// Reserves one send for `campaign` and returns how long to wait before making it.
    func reserve(campaign: Int64, rate: Int, now: Double = RateLimiter.monotonicSeconds()) -> Double {
        guard rate > 0 else { return 0 }
        let interval = 1 / Double(rate)
        let burst = max(interval, 0.1)
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
