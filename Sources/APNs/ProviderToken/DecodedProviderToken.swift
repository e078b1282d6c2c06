/// A provider token taken apart, for servers that check tokens the way APNs does.
/// Decoding checks structure only; `ES256PublicKey.verify` checks the signature.
public struct DecodedProviderToken: Sendable, Hashable {
    /// The header's `alg`; APNs accepts only "ES256".
    public var algorithm: String
    /// The header's `kid`.
    public var keyID: String
    /// The claims' `iss` (team id).
    public var issuer: String
    /// The claims' `iat`, seconds since the epoch.
    public var issuedAt: Int64
    /// `header.claims` as sent: the bytes the signature covers.
    public var signingInput: [UInt8]
    /// The decoded signature (64 bytes for a well-formed ES256 token).
    public var signature: [UInt8]

    /// Longest token accepted, far above the ~200 bytes of a real one; bounds the work an
    /// attacker can cause.
    public static let maxLength = 4096

    public init(jwt: String) throws(ProviderTokenDecodingError) {
        let bytes = Array(jwt.utf8)
        guard !bytes.isEmpty else { throw .malformed("the token is empty") }
        guard bytes.count <= DecodedProviderToken.maxLength else { throw .malformed("the token is longer than \(DecodedProviderToken.maxLength) bytes") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("expected three dot-separated parts, found \(parts.count)") }
        guard let headerBytes = Base64URL.decode(parts[0]) else { throw .malformed("the header is not base64url") }
        guard let claimsBytes = Base64URL.decode(parts[1]) else { throw .malformed("the claims are not base64url") }
        guard let signature = Base64URL.decode(parts[2]) else { throw .malformed("the signature is not base64url") }

        guard case .object(let header)? = try? JSONValue.parse(headerBytes, maxDepth: 8) else { throw .malformed("the header is not a JSON object") }
        guard case .object(let claims)? = try? JSONValue.parse(claimsBytes, maxDepth: 8) else { throw .malformed("the claims are not a JSON object") }
        guard case .string(let alg)? = header["alg"] else { throw .malformed("the header has no string \"alg\"") }
        guard case .string(let kid)? = header["kid"] else { throw .malformed("the header has no string \"kid\"") }
        guard case .string(let iss)? = claims["iss"] else { throw .malformed("the claims have no string \"iss\"") }
        guard case .number(let iatNumber)? = claims["iat"], let iat = iatNumber.int64Value else {
            throw .malformed("the claims have no integer \"iat\"")
        }
        algorithm = alg
        keyID = kid
        issuer = iss
        issuedAt = iat
        signingInput = Array(bytes[0..<(parts[0].count + 1 + parts[1].count)])
        self.signature = signature
    }

    /// Reads the token out of an `authorization` header value ("bearer <jwt>", scheme in any case).
    public init(authorization: String) throws(ProviderTokenDecodingError) {
        let prefix = "bearer "
        guard authorization.utf8.count > prefix.utf8.count,
              authorization.prefix(prefix.count).lowercased() == prefix else {
            throw .malformed("the authorization header is not \"bearer <token>\"")
        }
        try self.init(jwt: String(authorization.dropFirst(prefix.count)))
    }
}

public enum ProviderTokenDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    case malformed(String)

    public var description: String {
        switch self {
        case .malformed(let detail): return "malformed provider token: \(detail)"
        }
    }
}
