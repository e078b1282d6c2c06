/// When a sender replaces its provider token: the one policy for every holder of tokens
/// (`ProviderTokenCache` in one process, the daemon's shared `pushd.provider_tokens`).
///
/// APNs answers 403 ExpiredProviderToken to a token whose `iat` is over 60 minutes old, and
/// 429 TooManyProviderTokenUpdates to a token change on a connection less than 20 minutes (the
/// update window) after the previous change, where the creation of the token in use counts
/// as a change. So a holder
/// - replaces its token once it is `refreshSeconds` old (1,200–3,300: never within the
///   window, always before the hour),
/// - and never within the window (plus a second) of adopting the one it holds: a token taken over from
///   another instance may already be old, and switching away from it early would be a second
///   change on the same connections;
/// - takes over a shared token only while it has `updateWindowSeconds` of life left beyond
///   that hold, so holding it never outlives the hour.
///
/// Pure: time comes in as seconds since 1970, so tests drive hours of it without waiting.
public struct ProviderTokenPolicy: Sendable, Equatable {
    /// APNs's update window.
    public static let apnsUpdateWindowSeconds: Int64 = 20 * 60
    /// APNs's limit on a token's age.
    public static let apnsMaximumAgeSeconds: Int64 = 60 * 60
    /// The latest refresh allowed: five minutes before APNs's hour, for clocks that disagree.
    public static let latestRefreshSeconds: Int64 = 55 * 60
    public static let defaultRefreshSeconds: Int64 = 50 * 60
    /// How far in the future a token's `iat` may lie (the clock stepped back) before it is replaced.
    public static let futureToleranceSeconds: Int64 = 300

    public let refreshSeconds: Int64
    public let updateWindowSeconds: Int64

    /// APNs's rules with the default refresh of 50 minutes.
    public static let apns = ProviderTokenPolicy(checkedRefreshSeconds: defaultRefreshSeconds, updateWindowSeconds: apnsUpdateWindowSeconds)

    private init(checkedRefreshSeconds: Int64, updateWindowSeconds: Int64) {
        refreshSeconds = checkedRefreshSeconds
        self.updateWindowSeconds = updateWindowSeconds
    }

    /// The refresh settings accepted with `updateWindowSeconds` (1,200–3,300 with APNs's window).
    public static func refreshRange(updateWindowSeconds: Int64 = apnsUpdateWindowSeconds) -> ClosedRange<Int64> {
        updateWindowSeconds...latestRefreshSeconds
    }

    /// - Parameter updateWindowSeconds: APNs's 20 minutes; shorter only against a test server
    ///   that enforces a shorter window.
    public init(refreshSeconds: Int64 = defaultRefreshSeconds,
                updateWindowSeconds: Int64 = apnsUpdateWindowSeconds) throws(ProviderTokenPolicyError) {
        guard (1...Self.apnsUpdateWindowSeconds).contains(updateWindowSeconds) else {
            throw .updateWindowOutOfRange(updateWindowSeconds)
        }
        let range = Self.refreshRange(updateWindowSeconds: updateWindowSeconds)
        guard range.contains(refreshSeconds) else { throw .refreshOutOfRange(refreshSeconds, range) }
        self.refreshSeconds = refreshSeconds
        self.updateWindowSeconds = updateWindowSeconds
    }

    /// The token a holder sends with: its JWT, its `iat`, and when the holder adopted it.
    public struct Held: Sendable, Equatable {
        public var jwt: String
        public var issuedAt: Int64
        public var adoptedAt: Int64

        public init(jwt: String, issuedAt: Int64, adoptedAt: Int64) {
            self.jwt = jwt
            self.issuedAt = issuedAt
            self.adoptedAt = adoptedAt
        }
    }

    /// Whether `held` must be replaced before sending at `now`.
    public func isDue(_ held: Held?, now: Int64) -> Bool {
        guard let held else { return true }
        let age = now - held.issuedAt
        if age < -Self.futureToleranceSeconds { return true }
        if age >= Self.apnsMaximumAgeSeconds - Self.futureToleranceSeconds { return true }
        // Strictly beyond the window: times are whole seconds, and APNs's clock may read a
        // second later than ours did at the previous change.
        return age >= refreshSeconds && age > updateWindowSeconds && now - held.adoptedAt > updateWindowSeconds
    }

    /// The oldest a shared token may be for a holder to take it over rather than mint anew.
    public var adoptableAgeSeconds: Int64 {
        min(refreshSeconds, Self.apnsMaximumAgeSeconds - Self.futureToleranceSeconds - updateWindowSeconds)
    }

    /// Whether a token issued at `issuedAt` (minted elsewhere) may be taken over at `now`.
    public func mayAdopt(issuedAt: Int64, now: Int64) -> Bool {
        let age = now - issuedAt
        return age >= -Self.futureToleranceSeconds && age < adoptableAgeSeconds
    }

    /// After APNs answered ExpiredProviderToken to `held`: replace it only outside the update
    /// window. Inside it the clocks disagree, and a new token would only earn
    /// TooManyProviderTokenUpdates.
    public func mayReplaceAfterExpired(_ held: Held, now: Int64) -> Bool {
        now - held.adoptedAt > updateWindowSeconds && now - held.issuedAt > updateWindowSeconds
    }

    /// What a holder does when APNs answers ExpiredProviderToken to a request.
    public enum AfterExpired: Sendable, Equatable {
        /// The request carried a token the holder has replaced since: the answer judges that
        /// one, not the token held, and changes nothing.
        case stale
        /// Replace the token held.
        case replace
        /// Keep the token held for the update window. `clockOff`: this host issued it less than
        /// the window ago while APNs counts it over an hour old, so this host's clock is more
        /// than 40 minutes off and every token it mints will be called expired too.
        case keep(clockOff: Bool)
    }

    /// APNs answered ExpiredProviderToken to a request that carried the token `carried` (its
    /// JWT) while the holder holds `held`. When several requests with one token are in flight,
    /// the first answer replaces it and the others arrive after: they are about the old token.
    public func afterExpired(carried: String, held: Held, now: Int64) -> AfterExpired {
        guard carried == held.jwt else { return .stale }
        if mayReplaceAfterExpired(held, now: now) { return .replace }
        return .keep(clockOff: now - held.issuedAt < updateWindowSeconds)
    }
}

/// A provider-token setting out of range; the message names the setting and the range.
public enum ProviderTokenPolicyError: Error, Equatable, CustomStringConvertible {
    case refreshOutOfRange(Int64, ClosedRange<Int64>)
    case updateWindowOutOfRange(Int64)

    public var description: String {
        switch self {
        case .refreshOutOfRange(let value, let range):
            "provider token refresh \(value) s is outside \(range.lowerBound)–\(range.upperBound) s: APNs refuses a token "
                + "change within \(range.lowerBound) s of the previous one (TooManyProviderTokenUpdates) and tokens "
                + "over 3600 s old (ExpiredProviderToken)"
        case .updateWindowOutOfRange(let value):
            "provider token update window \(value) s is outside 1–1200 s (APNs's rule is 1200 s)"
        }
    }
}
