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

    /// Capped campaigns a worker of this process is pacing a chunk of, with how many such
    /// chunks: the lease passes them over (`CampaignStore.leaseChunk(skipping:)`), so a capped
    /// campaign takes one chunk of this process at a time and the workers lease other
    /// campaigns' chunks while they wait between its sends. Leased without it, every worker
    /// that came free took another chunk of the oldest capped campaign, each sent a fraction
    /// of the one cap, and no other campaign was sent.
    private let pacing = Lock<[Int64: Int]>([:])

    func startPacing(campaign: Int64) {
        pacing.withLock { $0[campaign, default: 0] += 1 }
    }

    func stopPacing(campaign: Int64) {
        pacing.withLock { pacing in
            guard let count = pacing[campaign] else { return }
            pacing[campaign] = count > 1 ? count - 1 : nil
        }
    }

    /// The moment (monotonic seconds) of `campaign`'s next send here, nil when none was reserved.
    func nextMoment(campaign: Int64) -> Double? {
        schedule.withLock { $0[campaign] }
    }

    /// The campaigns being paced now, for the lease to pass over.
    var pacedCampaigns: [Int64] { pacing.withLock { Array($0.keys) } }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
