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
        guard case .wait(let seconds) = reserve(campaign: campaign, rate: rate, now: now, notAfter: .infinity) else {
            preconditionFailure("a send with no deadline is always reserved")
        }
        return seconds
    }

    /// A send reserved, or the moment the next one could be made.
    enum Reservation: Equatable {
        /// Reserved: make it after this many seconds.
        case wait(Double)
        /// Nothing reserved: the campaign's next send is this many seconds away, later than
        /// the caller can wait.
        case beyond(Double)
    }

    /// Reserves one send for `campaign` if it can be made by `deadline` (monotonic seconds);
    /// otherwise reserves nothing, so the slot stays for another worker. A parked batch holds
    /// its transaction open while it waits: with many workers sharing one campaign's cap,
    /// each waited for all the others' sends, and outlived the session's idle limit.
    func reserve(campaign: Int64, rate: Int, now: Double = RateLimiter.monotonicSeconds(), notAfter deadline: Double) -> Reservation {
        guard rate > 0 else { return .wait(0) }
        let interval = 1 / Double(rate)
        let burst = max(interval, Self.burstSeconds)
        return schedule.withLock { schedule -> Reservation in
            let earliest = max(schedule[campaign] ?? now, now - burst)
            let wait = max(0, earliest - now)
            guard now + wait <= deadline else { return .beyond(wait) }
            schedule[campaign] = earliest + interval
            return .wait(wait)
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
