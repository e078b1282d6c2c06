/// A signed provider token (JWT) and when it was issued.
public struct ProviderToken: Sendable, Hashable, CustomStringConvertible {
    /// `header.claims.signature`, each part base64url without padding.
    public var jwt: String
    public var keyID: String
    public var teamID: String
    /// The `iat` claim: seconds since the epoch.
    public var issuedAt: Int64

    public init(jwt: String, keyID: String, teamID: String, issuedAt: Int64) {
        self.jwt = jwt
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
    }

    /// Reads kid, iss and iat back out of a token minted elsewhere (another instance, via the
    /// shared store).
    public init(jwt: String) throws(ProviderTokenDecodingError) {
        let decoded = try DecodedProviderToken(jwt: jwt)
        guard decoded.algorithm == "ES256" else { throw .malformed("the algorithm is \(decoded.algorithm), not ES256") }
        self.init(jwt: jwt, keyID: decoded.keyID, teamID: decoded.issuer, issuedAt: decoded.issuedAt)
    }

    /// The `authorization` header value.
    public var authorizationValue: String { "bearer " + jwt }

    public func age(now: Int64) -> Int64 { now - issuedAt }

    /// Names the key and issue time, never the token itself: a token is a credential for an hour.
    public var description: String { "ProviderToken(kid: \(keyID), iss: \(teamID), iat: \(issuedAt))" }
}

/// Makes provider tokens with one signing key.
public struct ProviderTokenSigner: Sendable {
    public let key: SigningKey

    public init(key: SigningKey) { self.key = key }

    /// Signs `{"alg":"ES256","kid":…}.{"iss":…,"iat":…}`.
    public func makeToken(issuedAt: Int64) throws(SigningKeyError) -> ProviderToken {
        var header = JSONWriter(capacity: 40)
        header.writeObject([JSONMember(key: "alg", value: "ES256"), JSONMember(key: "kid", value: .string(key.keyID))])
        var claims = JSONWriter(capacity: 40)
        claims.writeObject([JSONMember(key: "iss", value: .string(key.teamID)), JSONMember(key: "iat", value: .number(JSONNumber(issuedAt)))])
        var token = [UInt8]()
        token.reserveCapacity(200)
        Base64URL.encode(header.bytes, into: &token)
        token.append(UInt8(ascii: "."))
        Base64URL.encode(claims.bytes, into: &token)
        let signature = try key.sign(token)
        token.append(UInt8(ascii: "."))
        Base64URL.encode(signature, into: &token)
        return ProviderToken(jwt: String(decoding: token, as: UTF8.self), keyID: key.keyID, teamID: key.teamID, issuedAt: issuedAt)
    }
}
