import Foundation
import Synchronization

/// Hands out one provider token per signing key and decides when to mint the next.
///
/// APNs refuses tokens older than 60 minutes (ExpiredProviderToken) and punishes changing
/// them more often than every 20 minutes (TooManyProviderTokenUpdates), so the same token is
/// reused for `reuseSeconds` (50 minutes by default) and a new one is never minted within
/// `minimumReissueSeconds` (20 minutes) of the last, except through
/// `tokenAfterExpiredProviderToken` for a token older than that. Minting happens under the
/// lock so that concurrent callers never mint twice.
public final class ProviderTokenCache: Sendable {
    public let signer: ProviderTokenSigner
    public let reuseSeconds: Int64
    public let minimumReissueSeconds: Int64

    private struct State: Sendable {
        var current: ProviderToken?
        var lastMintAt: Int64?
        var mintCount = 0
    }

    private let state = Mutex(State())

    public init(key: SigningKey, reuseSeconds: Int64 = 50 * 60, minimumReissueSeconds: Int64 = 20 * 60) {
        self.signer = ProviderTokenSigner(key: key)
        self.reuseSeconds = reuseSeconds
        self.minimumReissueSeconds = minimumReissueSeconds
    }

    /// The token to send with now; minted when none exists or the current one has been used
    /// for `reuseSeconds`.
    public func token(now: Int64 = ProviderTokenCache.currentEpochSeconds()) throws(SigningKeyError) -> ProviderToken {
        try state.withLock { (state: inout State) throws(SigningKeyError) -> ProviderToken in
            if let current = state.current {
                let age = current.age(now: now)
                // After the clock stepped back a little the token is still fine; after it stepped
                // back a lot its iat lies in the future, which APNs refuses, so mint anew.
                if age < -ProviderTokenCache.futureTolerance { return try mint(&state, now: now) }
                if age < reuseSeconds { return current }
                if let last = state.lastMintAt, now - last < minimumReissueSeconds, now >= last { return current }
            }
            return try mint(&state, now: now)
        }
    }

    /// The token to use after APNs answered ExpiredProviderToken to `rejected`. Mints a new one
    /// only if `rejected` is still the current token and is at least `minimumReissueSeconds`
    /// old; a token another caller already replaced is not replaced again.
    public func tokenAfterExpiredProviderToken(rejected: String, now: Int64 = ProviderTokenCache.currentEpochSeconds()) throws(SigningKeyError) -> ProviderToken {
        try state.withLock { (state: inout State) throws(SigningKeyError) -> ProviderToken in
            guard let current = state.current else { return try mint(&state, now: now) }
            if current.jwt != rejected { return current }
            if current.age(now: now) < minimumReissueSeconds { return current }
            return try mint(&state, now: now)
        }
    }

    /// Takes a token minted elsewhere (by another instance, through the shared store) as the
    /// current one, if it is newer than what the cache holds.
    public func adopt(_ token: ProviderToken) {
        state.withLock { state in
            if let current = state.current, current.issuedAt >= token.issuedAt { return }
            state.current = token
            state.lastMintAt = token.issuedAt
        }
    }

    /// The token currently handed out, without minting.
    public var current: ProviderToken? { state.withLock { $0.current } }

    /// How many tokens this cache has signed.
    public var mintCount: Int { state.withLock { $0.mintCount } }

    private func mint(_ state: inout State, now: Int64) throws(SigningKeyError) -> ProviderToken {
        let token = try signer.makeToken(issuedAt: now)
        state.current = token
        state.lastMintAt = now
        state.mintCount += 1
        return token
    }

    /// How far in the future a cached token's iat may be before it is replaced (seconds).
    static let futureTolerance: Int64 = 300

    public static func currentEpochSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }
}
