/// When to send one waiting notification of a lane that is down, so that APNs can show it is
/// back.
///
/// A lane is back only once APNs answers a send on it, and what waits on a down lane is
/// retried after a backoff that grows with the outage (up to half the time waited, 5 minutes
/// at most): with one notification waiting, or a few, nothing would be sent for up to minutes
/// after APNs answers again, and /readyz would say it is down all that time. So while a lane is
/// down, every `interval` (spread at random by ±`spread` of it, so that instances started
/// together do not probe together) the soonest waiting notification of each app down on it is
/// made due; its answer ends the outage, and the `apns_back` path makes the rest due. The
/// members of a lane are whatever the caller tracks outages of (an app and an environment):
/// all of a lane's down members are probed together.
///
/// Pure: the caller gives the clock and the random source. Not thread-safe; the caller locks.
struct OutageProbe: Sendable {
    /// Seconds between probes of one lane, before the spread.
    let interval: Double
    /// The random spread of each wait, a fraction of `interval`.
    static let spread = 0.25

    /// Monotonic time of each down lane's next probe.
    private var next: [String: Double] = [:]

    init(interval: Double) {
        self.interval = interval
    }

    /// The apps of `lane` to probe now: none while the lane is up (`appsDown` empty, which
    /// forgets the lane) or before its probe is due; else all of `appsDown`, and the lane's next
    /// probe is one spread interval away. The first look at a down lane schedules its first
    /// probe, an interval after the outage was seen: its own retries are still short then.
    ///
    /// `answering`: APNs answered on the lane since its last failure (`OperatorLog.isAnswering`).
    /// The outage ends only with answers `again` seconds apart, and the probe may be the only
    /// send there is while a lane is down (what waits is set aside until then): so the next
    /// probe is due within `again`, not a whole interval later.
    mutating func appsToProbe<Member>(lane: String, appsDown: [Member], answering: Bool = false, again: Double = 1, now: Double,
                                      random: inout some RandomNumberGenerator) -> [Member] {
        guard !appsDown.isEmpty else {
            if !next.isEmpty { next.removeValue(forKey: lane) }
            return []
        }
        guard var due = next[lane] else {
            next[lane] = now + wait(&random)
            return []
        }
        if answering, due - now > again {
            due = now + again
            next[lane] = due
        }
        guard now >= due else { return [] }
        next[lane] = now + (answering ? again : wait(&random))
        return appsDown
    }

    /// When the lane's next probe is due, nil when none is scheduled (the lane is up).
    func nextProbe(lane: String) -> Double? { next[lane] }

    private func wait(_ random: inout some RandomNumberGenerator) -> Double {
        interval * Double.random(in: (1 - Self.spread)...(1 + Self.spread), using: &random)
    }
}
