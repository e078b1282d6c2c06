import APNs

/// One connection's provider-token state, as APNs keeps it: the token in use, when it was
/// issued, when the connection last changed tokens, and the verdict on every distinct token
/// seen, so each signature is checked once per connection rather than per request.
///
/// APNs answers TooManyProviderTokenUpdates to a token change less than 20 minutes (the
/// update window) after the previous change. A change is a switch to another token on the
/// connection or the creation of the token in use: a connection's first token is free, but
/// switching from it within the window of either its `iat` or the connection's last switch
/// is refused. Replacing an expired token is always allowed.
///
/// A connection is tied to the key of its first push's token: a valid token of another key
/// id later on it answers 403 UnrelatedKeyIdInToken ("The key ID in the provider token isn't
/// related to the key ID of the token used in the first push of this connection. To use this
/// token, open a new connection.").
struct ProviderTokenState {
    enum Outcome: Equatable {
        /// Accepted; `first` is true for the connection's first valid token.
        case accepted(first: Bool)
        case rejected(status: Int, reason: APNsReason)
    }

    private enum Verdict {
        case valid(issuedAt: Int64, keyID: String)
        case invalid(APNsReason)
    }

    /// APNs refuses a token change within this many seconds of the previous one.
    static let apnsUpdateWindowSeconds: Int64 = 20 * 60
    /// Distinct tokens remembered per connection; a client cycling through more is misbehaving
    /// and simply pays for verification again.
    static let cacheLimit = 64

    /// Shorter than APNs's 20 minutes only so that tests see the rule in seconds.
    let updateWindowSeconds: Int64
    private var current: String?
    private var currentIssuedAt: Int64 = 0
    private var lastSwitchAt: Int64?
    /// The key id of the connection's first accepted token.
    private var firstKeyID: String?
    private var verdicts: [String: Verdict] = [:]
    private(set) var signatureChecks = 0

    init(updateWindowSeconds: Int64 = Self.apnsUpdateWindowSeconds) {
        self.updateWindowSeconds = updateWindowSeconds
    }

    mutating func authorize(_ authorization: String?, now: Int64, verifier: ProviderTokenVerifier) -> Outcome {
        guard let authorization, !authorization.isEmpty else { return .rejected(status: 403, reason: .missingProviderToken) }
        let maximumAge = verifier.maximumAgeSeconds
        if authorization == current {
            if now - currentIssuedAt > maximumAge { return .rejected(status: 403, reason: .expiredProviderToken) }
            return .accepted(first: false)
        }
        let verdict = verdicts[authorization] ?? verify(authorization, now: now, verifier: verifier)
        switch verdict {
        case .invalid(let reason):
            return .rejected(status: 403, reason: reason)
        case .valid(let issuedAt, let keyID):
            if now - issuedAt > maximumAge { return .rejected(status: 403, reason: .expiredProviderToken) }
            if let firstKeyID, keyID != firstKeyID { return .rejected(status: 403, reason: .unrelatedKeyIdInToken) }
            if current != nil {
                let currentExpired = now - currentIssuedAt > maximumAge
                let previousChange = max(currentIssuedAt, lastSwitchAt ?? currentIssuedAt)
                if !currentExpired && now - previousChange < updateWindowSeconds {
                    return .rejected(status: 429, reason: .tooManyProviderTokenUpdates)
                }
                lastSwitchAt = now
            }
            let first = current == nil
            if first { firstKeyID = keyID }
            current = authorization
            currentIssuedAt = issuedAt
            return .accepted(first: first)
        }
    }

    private mutating func verify(_ authorization: String, now: Int64, verifier: ProviderTokenVerifier) -> Verdict {
        let verdict: Verdict
        if let token = try? DecodedProviderToken(authorization: authorization) {
            signatureChecks += 1
            switch verifier.check(token, now: now) {
            case nil, .expiredProviderToken?: verdict = .valid(issuedAt: token.issuedAt, keyID: token.keyID)
            case let reason?: verdict = .invalid(reason)
            }
        } else {
            verdict = .invalid(.invalidProviderToken)
        }
        if verdicts.count >= Self.cacheLimit { verdicts.removeAll(keepingCapacity: true) }
        verdicts[authorization] = verdict
        return verdict
    }
}
