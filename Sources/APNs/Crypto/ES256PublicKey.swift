internal import COpenSSL

/// A P-256 public key that checks ES256 signatures, as APNs checks provider tokens.
///
/// Thread ownership: the EVP_PKEY is created in init, never modified, and freed in deinit;
/// each `verify` uses its own EVP_MD_CTX, so many threads may verify at once.
public final class ES256PublicKey: @unchecked Sendable {
    private let pkey: OpaquePointer

    /// From PEM "-----BEGIN PUBLIC KEY-----" text.
    public convenience init(pem: String) throws(ES256PublicKeyError) {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        let bytes = Array(pem.utf8)
        guard bytes.count <= 64 * 1024 else { throw .invalidKey("\(bytes.count) bytes is far too large for a PEM public key") }
        guard let loaded = bytes.withUnsafeBytes({ raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }) else {
            throw .invalidKey(takeOpenSSLErrors(default: "no PEM public key found"))
        }
        try self.init(taking: loaded)
    }

    /// From a DER SubjectPublicKeyInfo.
    public convenience init(subjectPublicKeyInfoDER der: [UInt8]) throws(ES256PublicKeyError) {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        guard let loaded = der.withUnsafeBufferPointer({ buffer -> OpaquePointer? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }) else {
            throw .invalidKey(takeOpenSSLErrors(default: "not a DER SubjectPublicKeyInfo"))
        }
        try self.init(taking: loaded)
    }

    private init(taking loaded: OpaquePointer) throws(ES256PublicKeyError) {
        var nameBuffer = [CChar](repeating: 0, count: 80)
        var nameLength = 0
        let isEC = EVP_PKEY_get_base_id(loaded) == pushd_openssl_pkey_ec()
        let named = isEC && EVP_PKEY_get_group_name(loaded, &nameBuffer, nameBuffer.count, &nameLength) == 1
        let curve = named ? String(decoding: nameBuffer[..<min(nameLength, nameBuffer.count)].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        guard curve == "prime256v1" || curve == "P-256" else {
            EVP_PKEY_free(loaded)
            ERR_clear_error()
            throw .notP256(isEC ? "an EC key on \(curve.isEmpty ? "an unnamed curve" : curve)" : "a non-EC key")
        }
        pkey = loaded
    }

    deinit { EVP_PKEY_free(pkey) }

    /// Whether `signature` (raw r‖s, 64 bytes) is a valid ES256 signature of `message`.
    /// Anything malformed is simply not valid.
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        guard let der = ECDSASignature.derFromRaw(signature) else { return false }
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            ERR_clear_error()
            return false
        }
        let status = der.withUnsafeBufferPointer { sig in
            message.withUnsafeBufferPointer { msg in
                EVP_DigestVerify(ctx, sig.baseAddress, sig.count, msg.baseAddress, msg.count)
            }
        }
        if status != 1 { ERR_clear_error() }
        return status == 1
    }
}

public enum ES256PublicKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    case invalidKey(String)
    case notP256(String)

    public var description: String {
        switch self {
        case .invalidKey(let detail): return "not a usable public key: \(detail)"
        case .notP256(let found): return "public key is \(found); ES256 needs a P-256 (prime256v1) key"
        }
    }
}
