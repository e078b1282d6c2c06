import Posix
import Glibc

/// When to try a failed notification again, and when to stop.
///
/// Exponential backoff with full jitter: the delay before attempt n+1 is uniform in
/// [0, min(maxDelay, baseDelay · 2^(n−1))]. Full jitter spreads a burst of failures (an APNs
/// outage fails thousands of streams at once) evenly over the window instead of sending them
/// back together. A pure function: the caller supplies the clock and the random source.
public struct RetryPolicy: Sendable, Hashable {
    /// Ceiling of the first retry's delay, in seconds.
    public var baseDelay: Double
    /// No delay exceeds this, in seconds.
    public var maxDelay: Double
    /// Ceiling of the first delay after TooManyRequests / TooManyProviderTokenUpdates: APNs
    /// throttles per device and per connection for longer than a transient error lasts.
    public var throttledBaseDelay: Double
    /// Attempts in total, the first send included.
    public var maxAttempts: Int
    /// Attempts in total for a reason this code does not know, or an unreadable error body:
    /// enough to ride out a transient oddity, few enough that a permanent one ends up in
    /// dead letters quickly.
    public var maxAttemptsForUnknownReasons: Int
    /// With `apns-expiration: 0` ("deliver once, do not store") a retry still makes sense, but
    /// only shortly after the first attempt: a call notification minutes late is worse than none.
    public var expirationZeroWindow: Double
    /// How long, from the first attempt, a notification that gets no answer at all (APNs or the
    /// path to it down) keeps being retried. Such sends do not use up `maxAttempts`: an outage
    /// says nothing about the notification.
    public var outageLimit: Double

    public init(
        baseDelay: Double = 1,
        maxDelay: Double = 300,
        throttledBaseDelay: Double = 10,
        maxAttempts: Int = 8,
        maxAttemptsForUnknownReasons: Int = 3,
        expirationZeroWindow: Double = 30,
        outageLimit: Double = 86_400
    ) {
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.throttledBaseDelay = throttledBaseDelay
        self.maxAttempts = maxAttempts
        self.maxAttemptsForUnknownReasons = maxAttemptsForUnknownReasons
        self.expirationZeroWindow = expirationZeroWindow
        self.outageLimit = outageLimit
    }

    /// - Parameters:
    ///   - attempt: attempts already made, the failed one included (1 after the first failure).
    ///   - reason: the APNs reason; nil for an answer without a readable one, which gets the
    ///     budget of an unknown reason (an answer with no response at all goes to
    ///     `decideAfterNoAnswer`).
    ///   - now: the current time.
    ///   - expiration: the notification's `apns-expiration` (epoch seconds), if any.
    ///   - firstAttemptAt: when the notification was first sent; bounds retries of `expiration: 0`.
    public func decide<Random: RandomNumberGenerator>(
        attempt: Int,
        reason: APNsReason?,
        now: Timestamp,
        expiration: Int64?,
        firstAttemptAt: Timestamp? = nil,
        random: inout Random
    ) -> RetryDecision {
        let limit = reason.map { $0.isKnown ? maxAttempts : maxAttemptsForUnknownReasons } ?? maxAttemptsForUnknownReasons
        if attempt >= limit {
            return .giveUp(why: "gave up after \(attempt) attempts" + (reason.map { " (last reason \($0))" } ?? " (the last answer had no readable reason)"))
        }
        let delay = delayBeforeRetry(attempt: attempt, reason: reason, random: &random)
        let next = now.addingTimeInterval(delay)
        if let expiration {
            if expiration == 0 {
                if let firstAttemptAt, next.timeIntervalSince(firstAttemptAt) > expirationZeroWindow {
                    return .giveUp(why: "apns-expiration 0 (deliver once) and the retry window of \(Int(expirationZeroWindow))s has passed")
                }
            } else if Double(expiration) <= next.timeIntervalSince1970 {
                return .giveUp(why: "the notification expires (apns-expiration \(expiration)) before the next attempt could be made")
            }
        }
        return .retry(after: delay, at: next)
    }

    /// Whether an answer says nothing against the notification itself: APNs is overloaded or
    /// failing (5xx), or throttling this device token or this connection (429). Such answers
    /// are retried within a time budget (`decideWithinBudget`) and do not use up `maxAttempts`;
    /// only answers that blame the request count as attempts.
    public static func saysNothingAgainstTheRequest(status: Int, reason: APNsReason?) -> Bool {
        if status >= 500 || status == 429 { return true }
        guard let reason else { return false }
        return notTheRequestsFault.contains(reason)
    }

    /// IdleTimeout (400) is about the connection, not the notification sent on it;
    /// ExpiredProviderToken (403) about the provider token it carried.
    private static let notTheRequestsFault: Set<APNsReason> = [
        .serviceUnavailable, .internalServerError, .shutdown, .tooManyRequests, .tooManyProviderTokenUpdates, .idleTimeout,
        .expiredProviderToken,
    ]

    /// After a send that got no answer at all (connection refused or reset, no response in
    /// time). Not an attempt; see `decideWithinBudget`.
    public func decideAfterNoAnswer<Random: RandomNumberGenerator>(
        now: Timestamp,
        expiration: Int64?,
        firstAttemptAt: Timestamp?,
        random: inout Random
    ) -> RetryDecision {
        decideWithinBudget(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt, throttled: false,
                           trouble: "no answer from APNs", random: &random)
    }

    /// After a send APNs could not or would not take for reasons of its own (no answer, a 5xx,
    /// 429 TooManyRequests): not an attempt. Retried until `outageLimit` has passed since
    /// `firstAttemptAt`, or the notification expires (with `apns-expiration: 0`, until
    /// `expirationZeroWindow` has passed since the first attempt). The delay is full jitter over
    /// a ceiling of half the time waited so far, at least `baseDelay` (`throttledBaseDelay`
    /// when `throttled`) and at most `maxDelay`: every retry multiplies the time waited, so the
    /// ceiling grows exponentially and a long storm is probed ever more rarely, while a short
    /// one ends with a short wait.
    ///
    /// - Parameters:
    ///   - throttled: APNs answered 429 (TooManyRequests, TooManyProviderTokenUpdates).
    ///   - trouble: what went wrong, for the reason given when the budget is spent.
    public func decideWithinBudget<Random: RandomNumberGenerator>(
        now: Timestamp,
        expiration: Int64?,
        firstAttemptAt: Timestamp?,
        throttled: Bool,
        trouble: String,
        random: inout Random
    ) -> RetryDecision {
        let waited = max(0, firstAttemptAt.map { now.timeIntervalSince($0) } ?? 0)
        if waited >= outageLimit {
            return .giveUp(why: "\(trouble) for \(Int(waited)) s (the limit is \(Int(outageLimit)) s)")
        }
        let floor = min(maxDelay, throttled ? throttledBaseDelay : baseDelay)
        let ceiling = min(maxDelay, max(floor, waited / 2))
        let unit = Double(random.next() >> 11) * 0x1p-53
        let delay = unit * ceiling
        let next = now.addingTimeInterval(delay)
        if let expiration {
            if expiration == 0 {
                if waited + delay > expirationZeroWindow {
                    return .giveUp(why: "apns-expiration 0 (deliver once) and the retry window of \(Int(expirationZeroWindow))s has passed")
                }
            } else if Double(expiration) <= next.timeIntervalSince1970 {
                return .giveUp(why: "the notification expires (apns-expiration \(expiration)) before the next attempt could be made")
            }
        }
        return .retry(after: delay, at: next)
    }

    /// After a send that got no answer or a 5xx while APNs is known to take none of the lane's
    /// notifications (an outage seen, not one failure): no verdict on the notification, and no
    /// point in sending it again on its own schedule. It waits for APNs to be seen answering
    /// again — the caller's outage probe and its `apns_back` path make it due then — for at most
    /// `maxDelay` (spread over its last quarter, so that instances do not all return at once)
    /// and at most half of what is left of its time budget (the outage limit, its expiration, the
    /// `apns-expiration: 0` window), so that a notification whose budget ends within the outage
    /// is still tried, and given up with the usual reason, before it ends. A budget too short
    /// for that is decided as `decideWithinBudget` decides it.
    public func decideWhileDown<Random: RandomNumberGenerator>(
        now: Timestamp,
        expiration: Int64?,
        firstAttemptAt: Timestamp?,
        trouble: String,
        random: inout Random
    ) -> RetryDecision {
        let waited = max(0, firstAttemptAt.map { now.timeIntervalSince($0) } ?? 0)
        var left = outageLimit - waited
        if let expiration {
            left = min(left, expiration == 0 ? expirationZeroWindow - waited : Double(expiration) - now.timeIntervalSince1970)
        }
        let unit = Double(random.next() >> 11) * 0x1p-53
        let delay = min(maxDelay * (0.75 + 0.25 * unit), left / 2)
        guard delay >= baseDelay else {
            return decideWithinBudget(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt, throttled: false,
                                      trouble: trouble, random: &random)
        }
        return .retry(after: delay, at: now.addingTimeInterval(delay))
    }

    /// The jittered delay in seconds before the retry that follows attempt `attempt`.
    public func delayBeforeRetry<Random: RandomNumberGenerator>(attempt: Int, reason: APNsReason?, random: inout Random) -> Double {
        let base = (reason == .tooManyRequests || reason == .tooManyProviderTokenUpdates) ? throttledBaseDelay : baseDelay
        let exponent = Double(min(max(attempt, 1) - 1, 62))
        let ceiling = min(maxDelay, base * pow(2, exponent))
        guard ceiling.isFinite, ceiling > 0 else { return 0 }
        // One draw of 53 bits: uniform in [0, 1) and never a rejection loop, whatever the generator.
        let unit = Double(random.next() >> 11) * 0x1p-53
        return unit * ceiling
    }
}

public enum RetryDecision: Sendable, Hashable {
    /// Try again `after` seconds from now, that is at `at`.
    case retry(after: Double, at: Timestamp)
    /// Stop; the job goes to dead letters with `why`.
    case giveUp(why: String)
}
