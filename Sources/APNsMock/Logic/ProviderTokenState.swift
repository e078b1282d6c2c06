import APNs

/// One connection's provider-token state, as APNs keeps it: the token in use, when it was
/// adopted, and the verdict on every distinct token seen, so each signature is checked once
/// per connection rather than per request.
struct ProviderTokenState {
    enum Outcome: Equatable {
        /// Accepted; `first` is true for the connection's first valid token.
        case accepted(first: Bool)
        case rejected(status: Int, reason: APNsReason)
    }

    private enum Verdict {
        case valid(issuedAt: Int64)
        case invalid(APNsReason)
    }

    /// APNs refuses a token change within this many seconds of the previous one.
    static let minimumSecondsBetweenUpdates: Int64 = 20 * 60
    /// Distinct tokens remembered per connection; a client cycling through more is misbehaving
    /// and simply pays for verification again.
    static let cacheLimit = 64

    private var current: String?
    private var currentIssuedAt: Int64 = 0
    private var currentSince: Int64 = 0
    private var verdicts: [String: Verdict] = [:]
    private(set) var signatureChecks = 0

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
        case .valid(let issuedAt):
            if now - issuedAt > maximumAge { return .rejected(status: 403, reason: .expiredProviderToken) }
            if current != nil {
                let currentExpired = now - currentIssuedAt > maximumAge
                if !currentExpired && now - currentSince < Self.minimumSecondsBetweenUpdates {
                    return .rejected(status: 429, reason: .tooManyProviderTokenUpdates)
                }
            }
            let first = current == nil
            current = authorization
            currentIssuedAt = issuedAt
            currentSince = now
            return .accepted(first: first)
        }
    }

    private mutating func verify(_ authorization: String, now: Int64, verifier: ProviderTokenVerifier) -> Verdict {
        let verdict: Verdict
        if let token = try? DecodedProviderToken(authorization: authorization) {
            signatureChecks += 1
            switch verifier.check(token, now: now) {
            case nil, .expiredProviderToken?: verdict = .valid(issuedAt: token.issuedAt)
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
