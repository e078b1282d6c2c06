internal import COpenSSL
import Posix

/// An APNs token-signing key: the P-256 private key of a `.p8` file with its key id and team id.
///
/// Thread ownership: the EVP_PKEY is created in init, never modified, and freed in deinit.
/// OpenSSL 3 allows one key to sign from many threads at once as long as each call uses its
/// own EVP_MD_CTX, which `sign` does.
public final class SigningKey: @unchecked Sendable {
    public let keyID: String
    public let teamID: String
    private let pkey: OpaquePointer

    /// Loads a key file. The file's contents never appear in errors or logs.
    public convenience init(contentsOfFile path: String, keyID: String, teamID: String) throws(SigningKeyError) {
        guard let status = FileSystem.status(path) else { throw .fileNotFound(path: path) }
        guard !status.isDirectory else { throw .unreadableFile(path: path, detail: "it is a directory") }
        // Reading a device or a huge file by mistake would block or exhaust memory.
        guard status.isRegularFile else { throw .unreadableFile(path: path, detail: "it is not a regular file") }
        if status.size > SigningKey.maximumPEMSize {
            throw .unreadableFile(path: path, detail: "\(status.size) bytes is far too large for a key file")
        }
        let data: [UInt8]
        do {
            data = try FileSystem.read(path)
        } catch {
            throw .unreadableFile(path: path, detail: error.reason)
        }
        do {
            try self.init(pemBytes: data, keyID: keyID, teamID: teamID, source: path)
        } catch {
            throw error
        }
    }

    /// Loads a key from PEM text ("-----BEGIN PRIVATE KEY-----", PKCS#8, as Apple issues it;
    /// SEC1 "EC PRIVATE KEY" is accepted too).
    public convenience init(pem: String, keyID: String, teamID: String) throws(SigningKeyError) {
        try self.init(pemBytes: Array(pem.utf8), keyID: keyID, teamID: teamID, source: "PEM text")
    }

    private init(pemBytes: [UInt8], keyID: String, teamID: String, source: String) throws(SigningKeyError) {
        guard AppleIdentifier.isValid(keyID) else { throw .invalidKeyID(keyID) }
        guard AppleIdentifier.isValid(teamID) else { throw .invalidTeamID(teamID) }
        // A .p8 is about 250 bytes; anything near BIO's Int32 length limit is the wrong file.
        guard pemBytes.count <= SigningKey.maximumPEMSize else {
            throw .notAPrivateKey(source: source, detail: "\(pemBytes.count) bytes is far too large for a key file")
        }
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        guard let loaded = pemBytes.withUnsafeBytes({ raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            // An encrypted key must fail here, not prompt on a terminal the daemon does not have.
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil)
        }) else {
            throw .notAPrivateKey(source: source, detail: takeOpenSSLErrors(default: "no PEM private key found"))
        }
        guard EVP_PKEY_get_base_id(loaded) == pushd_openssl_pkey_ec() else {
            let bits = EVP_PKEY_get_bits(loaded)
            EVP_PKEY_free(loaded)
            throw .notP256(source: source, found: "a non-EC key of \(bits) bits")
        }
        var nameBuffer = [CChar](repeating: 0, count: 80)
        var nameLength = 0
        let curve: String
        if EVP_PKEY_get_group_name(loaded, &nameBuffer, nameBuffer.count, &nameLength) == 1 {
            curve = String(decoding: nameBuffer[..<min(nameLength, nameBuffer.count)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        } else {
            curve = "an unnamed curve"
        }
        guard curve == "prime256v1" || curve == "P-256" else {
            EVP_PKEY_free(loaded)
            ERR_clear_error()
            throw .notP256(source: source, found: "an EC key on \(curve)")
        }
        self.pkey = loaded
        self.keyID = keyID
        self.teamID = teamID
    }

    deinit { EVP_PKEY_free(pkey) }

    static let maximumPEMSize = 64 * 1024

    /// A warning when the key file can be read by its group or by others, nil otherwise (and
    /// when the file cannot be inspected: loading it will report that).
    public static func permissionWarning(forKeyFile path: String) -> String? {
        guard let mode = FileSystem.status(path)?.permissions else { return nil }
        guard mode & 0o044 != 0 else { return nil }
        return "signing key file \(path) is readable by \(mode & 0o004 != 0 ? "every user" : "its group") (mode \(String(mode & 0o777, radix: 8))); restrict it with chmod 600"
    }

    /// ES256 over `message`: SHA-256, ECDSA P-256, returned as the 64-byte r‖s JWS requires.
    public func sign(_ message: [UInt8]) throws(SigningKeyError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .signingFailed("out of memory") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw .signingFailed(takeOpenSSLErrors(default: "EVP_DigestSignInit failed"))
        }
        var der = [UInt8](repeating: 0, count: 80)
        var length = der.count
        let status = message.withUnsafeBufferPointer { input in
            der.withUnsafeMutableBufferPointer { output in
                EVP_DigestSign(ctx, output.baseAddress, &length, input.baseAddress, input.count)
            }
        }
        guard status == 1, length <= der.count else {
            throw .signingFailed(takeOpenSSLErrors(default: "EVP_DigestSign failed"))
        }
        guard let raw = ECDSASignature.rawFromDER(Array(der[..<length])) else {
            throw .signingFailed("OpenSSL returned a signature that is not a DER ECDSA-Sig-Value")
        }
        return raw
    }

    /// The matching public key, for verifying tokens this key signed.
    public var publicKey: ES256PublicKey {
        get throws(ES256PublicKeyError) {
            try ES256PublicKey(subjectPublicKeyInfoDER: publicKeyDER)
        }
    }

    /// The public half as a DER SubjectPublicKeyInfo: two keys are the same key when these match
    /// (a reload tells a replaced `.p8` from the same one read again).
    public var publicKeyDER: [UInt8] {
        get throws(ES256PublicKeyError) {
            var out: UnsafeMutablePointer<UInt8>?
            let length = i2d_PUBKEY(pkey, &out)
            guard length > 0, let out else {
                throw .invalidKey(takeOpenSSLErrors(default: "could not export the public key"))
            }
            defer { pushd_openssl_free(out) }
            return Array(UnsafeBufferPointer(start: out, count: Int(length)))
        }
    }
}

/// Apple's key ids and team ids: exactly ten ASCII letters or digits.
public enum AppleIdentifier {
    public static let length = 10

    public static func isValid(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == length else { return false }
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"): continue
            default: return false
            }
        }
        return true
    }
}

public enum SigningKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    case fileNotFound(path: String)
    case unreadableFile(path: String, detail: String)
    case notAPrivateKey(source: String, detail: String)
    case notP256(source: String, found: String)
    case invalidKeyID(String)
    case invalidTeamID(String)
    case signingFailed(String)

    public var description: String {
        switch self {
        case .fileNotFound(let path):
            return "signing key file \(path) does not exist"
        case .unreadableFile(let path, let detail):
            return "signing key file \(path) cannot be read: \(detail)"
        case .notAPrivateKey(let source, let detail):
            return "\(source) is not an unencrypted PEM private key (expected the .p8 file from Apple): \(detail)"
        case .notP256(let source, let found):
            return "\(source) holds \(found); APNs token signing needs a P-256 (prime256v1) EC key"
        case .invalidKeyID(let value):
            return "key id \"\(value)\" is invalid: expected \(AppleIdentifier.length) letters or digits, as shown next to the key in the developer account"
        case .invalidTeamID(let value):
            return "team id \"\(value)\" is invalid: expected \(AppleIdentifier.length) letters or digits, as shown in the developer account's membership details"
        case .signingFailed(let detail):
            return "ES256 signing failed: \(detail)"
        }
    }
}
