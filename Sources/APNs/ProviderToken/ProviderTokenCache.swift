import Posix
import Locking

/// Holds one signing key's provider token in one process (`pushd send`, tests, benchmarks)
/// and mints the next when `ProviderTokenPolicy` says so. Minting happens under the lock so
/// that concurrent callers never mint twice. The daemon shares its tokens between instances
/// through `pushd.provider_tokens` on the same policy.
public final class ProviderTokenCache: Sendable {
    public let signer: ProviderTokenSigner
    public let policy: ProviderTokenPolicy

    private struct State: Sendable {
        var current: ProviderToken?
        var adoptedAt: Int64 = 0
        var mintCount = 0

        var held: ProviderTokenPolicy.Held? {
            current.map { ProviderTokenPolicy.Held(jwt: $0.jwt, issuedAt: $0.issuedAt, adoptedAt: adoptedAt) }
        }
    }

    private let state = Lock(State())

    public init(key: SigningKey, policy: ProviderTokenPolicy = .apns) {
        self.signer = ProviderTokenSigner(key: key)
        self.policy = policy
    }

    /// The token to send with at `now`; minted when there is none or the policy says it is due.
    public func token(now: Int64 = ProviderTokenCache.currentEpochSeconds()) throws(SigningKeyError) -> ProviderToken {
        try state.withLock { (state: inout State) throws(SigningKeyError) -> ProviderToken in
            if let current = state.current, !policy.isDue(state.held, now: now) { return current }
            return try mint(&state, now: now)
        }
    }

    /// The token to use after APNs answered ExpiredProviderToken to `rejected`. Mints a new one
    /// only if `rejected` is still the current token and the policy allows replacing it; a
    /// token another caller already replaced is not replaced again.
    public func tokenAfterExpiredProviderToken(rejected: String, now: Int64 = ProviderTokenCache.currentEpochSeconds()) throws(SigningKeyError) -> ProviderToken {
        try state.withLock { (state: inout State) throws(SigningKeyError) -> ProviderToken in
            guard let current = state.current, let held = state.held else { return try mint(&state, now: now) }
            guard policy.afterExpired(carried: rejected, held: held, now: now) == .replace else { return current }
            return try mint(&state, now: now)
        }
    }

    /// The token currently handed out, without minting.
    public var current: ProviderToken? { state.withLock { $0.current } }

    /// How many tokens this cache has signed.
    public var mintCount: Int { state.withLock { $0.mintCount } }

    private func mint(_ state: inout State, now: Int64) throws(SigningKeyError) -> ProviderToken {
        let token = try signer.makeToken(issuedAt: now)
        state.current = token
        state.adoptedAt = now
        state.mintCount += 1
        return token
    }

    public static func currentEpochSeconds() -> Int64 { Int64(Timestamp().timeIntervalSince1970) }
}
