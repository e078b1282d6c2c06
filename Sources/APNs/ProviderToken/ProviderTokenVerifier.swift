/// Checks provider tokens the way APNs does, against a set of trusted keys.
///
/// Signature checks cost tens of microseconds; a server should remember tokens it already
/// accepted (APNs itself expects one token per connection for up to an hour).
public struct ProviderTokenVerifier: Sendable {
    public struct TrustedKey: Sendable {
        public var teamID: String
        public var publicKey: ES256PublicKey
        /// The one environment the key may be used in (Apple lets a team-scoped key be
        /// restricted to Sandbox or Production); nil for a key valid in both.
        public var environment: APNsEnvironment?

        public init(teamID: String, publicKey: ES256PublicKey, environment: APNsEnvironment? = nil) {
            self.teamID = teamID
            self.publicKey = publicKey
            self.environment = environment
        }
    }

    /// Trusted keys by key id.
    public var keys: [String: TrustedKey]
    /// APNs refuses tokens older than an hour.
    public var maximumAgeSeconds: Int64
    /// How far in the future `iat` may be before the token is refused (clock skew allowance).
    public var allowedFutureSkewSeconds: Int64
    /// The environment this server stands for: a valid token of a key bound to the other one
    /// is answered BadEnvironmentKeyInToken. nil checks no key's environment.
    public var environment: APNsEnvironment?

    public init(keys: [String: TrustedKey], maximumAgeSeconds: Int64 = 3600, allowedFutureSkewSeconds: Int64 = 60,
                environment: APNsEnvironment? = nil) {
        self.keys = keys
        self.maximumAgeSeconds = maximumAgeSeconds
        self.allowedFutureSkewSeconds = allowedFutureSkewSeconds
        self.environment = environment
    }

    /// nil when the token is acceptable; otherwise the reason APNs would answer with (status 403).
    public func check(authorization: String?, now: Int64) -> APNsReason? {
        guard let authorization, !authorization.isEmpty else { return .missingProviderToken }
        guard let token = try? DecodedProviderToken(authorization: authorization) else { return .invalidProviderToken }
        return check(token, now: now)
    }

    public func check(_ token: DecodedProviderToken, now: Int64) -> APNsReason? {
        guard token.algorithm == "ES256" else { return .invalidProviderToken }
        guard let trusted = keys[token.keyID] else { return .invalidProviderToken }
        guard token.issuer == trusted.teamID else { return .invalidProviderToken }
        guard token.issuedAt <= now + allowedFutureSkewSeconds else { return .invalidProviderToken }
        guard trusted.publicKey.verify(signature: token.signature, message: token.signingInput) else { return .invalidProviderToken }
        // Only a token that is the key's own is judged on the key's environment, as APNs does.
        if let bound = trusted.environment, let served = environment, bound != served { return .badEnvironmentKeyInToken }
        if now - token.issuedAt > maximumAgeSeconds { return .expiredProviderToken }
        return nil
    }
}
