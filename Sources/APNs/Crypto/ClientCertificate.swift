internal import COpenSSL
import Posix

/// What an APNs TLS client certificate says about itself, read with OpenSSL so that a wrong,
/// expired or mismatched certificate is reported when the configuration is checked, not as a
/// TLS handshake failure at the first send.
public struct ClientCertificateInfo: Sendable, Hashable {
    /// The subject in OpenSSL's one-line form, for example "/UID=com.example.app/CN=Apple Push Services: com.example.app".
    public var subject: String
    public var commonName: String?
    /// The subject's UID: the bundle id the certificate was issued for.
    public var userID: String?
    public var notBefore: Timestamp
    public var notAfter: Timestamp
    /// From Apple's extensions: development (sandbox), production, or both for a universal
    /// certificate. Empty for certificates without them (self-made test certificates).
    public var environments: Set<APNsEnvironment>
    /// Topics this certificate may push to: the topics extension of a universal certificate,
    /// or else the subject's UID.
    public var topics: [String]

    /// Why the certificate cannot serve `topic` in `environment` at `now`; empty when it can.
    public func problems(environment: APNsEnvironment, topic: String?, now: Timestamp = Timestamp()) -> [String] {
        var found = [String]()
        if now < notBefore { found.append("the certificate is not valid before \(notBefore)") }
        if now > notAfter { found.append("the certificate expired on \(notAfter)") }
        if !environments.isEmpty && !environments.contains(environment) {
            found.append("the certificate is for \(environments.map(\.rawValue).sorted().joined(separator: ", ")), not \(environment)")
        }
        if let topic, !topics.isEmpty {
            let bundle = PushType.typeOwningSuffix(of: topic).flatMap { $0.bundleID(fromTopic: topic) } ?? topic
            if !topics.contains(topic) && !topics.contains(bundle) {
                found.append("the certificate covers \(topics.joined(separator: ", ")), not \(topic)")
            }
        }
        return found
    }
}

/// Reads APNs client certificates without connecting anywhere: PEM (certificate and key in one
/// file or two), PKCS#12, and CA bundles. The one certificate loader of pushd (`load`):
/// `check-config`, `run` (at start and on every reload) and `send` all use it, and the TLS
/// layer is given what it loaded, from memory, never the files. The private key must match the
/// certificate; key material never appears in errors.
public enum ClientCertificate {
    /// Apple's extension marking a development (sandbox) push certificate.
    static let developmentOID = "1.2.840.113635.100.6.3.1"
    /// Apple's extension marking a production push certificate.
    static let productionOID = "1.2.840.113635.100.6.3.2"
    /// Apple's extension listing the topics of a universal certificate.
    static let topicsOID = "1.2.840.113635.100.6.3.6"
    static let maximumFileSize = 1024 * 1024

    public static func inspectPEM(certificateFile: String, keyFile: String? = nil) throws(ClientCertificateError) -> ClientCertificateInfo {
        try load(certificateFile: certificateFile, keyFile: keyFile).info
    }

    /// What `load(pemCertificate:…)` finds, without the key material.
    public static func inspectPEM(certificate: [UInt8], source: String = "PEM text",
                                  key: [UInt8]? = nil, keySource: String? = nil) throws(ClientCertificateError) -> ClientCertificateInfo {
        try load(pemCertificate: certificate, source: source, key: key, keySource: keySource).info
    }

    public static func inspectPKCS12(file: String, password: String?) throws(ClientCertificateError) -> ClientCertificateInfo {
        try load(pkcs12File: file, password: password).info
    }

    /// What `load(pkcs12:…)` finds, without the key material.
    public static func inspectPKCS12(_ bytes: [UInt8], source: String = "PKCS#12 data",
                                     password: String?) throws(ClientCertificateError) -> ClientCertificateInfo {
        try load(pkcs12: bytes, source: source, password: password).info
    }

    // MARK: - The loader

    /// A PEM certificate and its key from their files (the key from the certificate's file
    /// when `keyFile` is nil), read once, checked and kept in memory.
    public static func load(certificateFile: String, keyFile: String? = nil) throws(ClientCertificateError) -> ClientIdentity {
        let certificateBytes = try read(certificateFile)
        let keyBytes = try keyFile.map { (path: String) throws(ClientCertificateError) -> [UInt8] in try read(path) }
        return try load(pemCertificate: certificateBytes, source: certificateFile, key: keyBytes, keySource: keyFile)
    }

    /// A PEM certificate (followed by any chain certificates) and its private key (from `key`,
    /// or from the certificate's own bytes when nil), checked to belong together.
    public static func load(pemCertificate certificate: [UInt8], source: String = "PEM text",
                            key: [UInt8]? = nil, keySource: String? = nil) throws(ClientCertificateError) -> ClientIdentity {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        guard let cert = withBIO(certificate, { PEM_read_bio_X509($0, nil, nil, nil) }) else {
            throw ClientCertificateError("\(source) holds no PEM certificate (\(takeOpenSSLErrors(default: "no BEGIN CERTIFICATE block")))")
        }
        defer { X509_free(cert) }
        let keyName = keySource ?? source
        let part: ClientCertificateError.Part = keySource == nil ? .certificate : .key
        guard let pkey = withBIO(key ?? certificate, { PEM_read_bio_PrivateKey($0, nil, { _, _, _, _ in 0 }, nil) }) else {
            let hint = keySource == nil ? "; set key_file when the key is in a file of its own" : ""
            throw ClientCertificateError("\(keyName) holds no unencrypted PEM private key (\(takeOpenSSLErrors(default: "no BEGIN PRIVATE KEY block")))\(hint)",
                                         in: part)
        }
        defer { EVP_PKEY_free(pkey) }
        guard X509_check_private_key(cert, pkey) == 1 else {
            ERR_clear_error()
            throw ClientCertificateError("the private key in \(keyName) does not belong to the certificate in \(source)", in: part)
        }
        // The certificates after the first one of the file are its chain, sent with it.
        var chain = [OpaquePointer]()
        defer { for extra in chain { X509_free(extra) } }
        certificate.withUnsafeBytes { raw in
            guard raw.count <= maximumFileSize, let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return }
            defer { BIO_free(bio) }
            guard let first = PEM_read_bio_X509(bio, nil, nil, nil) else { return }
            X509_free(first)
            while let extra = PEM_read_bio_X509(bio, nil, nil, nil) { chain.append(extra) }
        }
        // Reading stops with a "no start line" error at the end of the input.
        ERR_clear_error()
        return try identity(cert: cert, chain: chain, pkey: pkey, source: source, keySource: keySource)
    }

    /// A PKCS#12 bundle from its file, read once, checked and kept in memory.
    public static func load(pkcs12File file: String, password: String?) throws(ClientCertificateError) -> ClientIdentity {
        try load(pkcs12: try read(file), source: file, password: password)
    }

    /// A PKCS#12 bundle: the password opens it, and it holds a certificate and its key (and
    /// maybe chain certificates, kept to be sent with it).
    public static func load(pkcs12 bytes: [UInt8], source: String = "PKCS#12 data",
                            password: String?) throws(ClientCertificateError) -> ClientIdentity {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        guard let bundle = withBIO(bytes, { d2i_PKCS12_bio($0, nil) }) else {
            throw ClientCertificateError("\(source) is not a PKCS#12 (.p12) file (\(takeOpenSSLErrors(default: "not DER PKCS#12")))")
        }
        defer { PKCS12_free(bundle) }
        // Bundles exported without a password use either an empty or a NULL one.
        var opensWithNull = false
        if PKCS12_mac_present(bundle) == 1 {
            if let password, PKCS12_verify_mac(bundle, password, -1) == 1 {
                opensWithNull = false
            } else if (password ?? "").isEmpty, PKCS12_verify_mac(bundle, nil, 0) == 1 {
                opensWithNull = true
            } else {
                ERR_clear_error()
                let hint = password == nil ? "no p12_password is set" : "the p12_password is wrong"
                throw ClientCertificateError("\(source) cannot be opened: \(hint)", in: .password)
            }
        }
        var pkey: OpaquePointer?
        var cert: OpaquePointer?
        var authorities: OpaquePointer?
        let parsed = PKCS12_parse(bundle, opensWithNull ? nil : (password ?? ""), &pkey, &cert, &authorities)
        defer {
            if let pkey { EVP_PKEY_free(pkey) }
            if let cert { X509_free(cert) }
            if let authorities { pushd_openssl_x509_stack_free(authorities) }
        }
        guard parsed == 1 else {
            throw ClientCertificateError("\(source) cannot be read: \(takeOpenSSLErrors(default: "PKCS12_parse failed"))")
        }
        guard let cert else { throw ClientCertificateError("\(source) holds no certificate") }
        guard let pkey else { throw ClientCertificateError("\(source) holds a certificate but no private key") }
        guard X509_check_private_key(cert, pkey) == 1 else {
            ERR_clear_error()
            throw ClientCertificateError("the private key in \(source) does not belong to its certificate")
        }
        var chain = [OpaquePointer]()
        if let authorities {
            for index in 0..<pushd_openssl_x509_stack_count(authorities) {
                if let extra = pushd_openssl_x509_stack_at(authorities, index) { chain.append(extra) }
            }
        }
        return try identity(cert: cert, chain: chain, pkey: pkey, source: source, keySource: nil)
    }

    /// The checked certificate, chain and key as PEM in memory, with what the certificate says.
    private static func identity(cert: OpaquePointer, chain: [OpaquePointer], pkey: OpaquePointer,
                                 source: String, keySource: String?) throws(ClientCertificateError) -> ClientIdentity {
        let info = try describe(cert: cert, source: source)
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        guard X509_digest(cert, EVP_sha256(), &digest, &length) == 1 else {
            throw ClientCertificateError("the certificate in \(source) cannot be hashed: \(takeOpenSSLErrors(default: "X509_digest failed"))")
        }
        let fingerprint = digest.prefix(Int(length)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
        guard let certificatePEM = pem({ bio in
                  PEM_write_bio_X509(bio, cert) == 1 && chain.allSatisfy { PEM_write_bio_X509(bio, $0) == 1 }
              }),
              let keyPEM = pem({ bio in PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 }) else {
            throw ClientCertificateError("the certificate in \(source) cannot be kept in memory: \(takeOpenSSLErrors(default: "PEM encoding failed"))")
        }
        return ClientIdentity(info: info, source: source, keySource: keySource, fingerprint: fingerprint,
                              certificateChainPEM: certificatePEM, privateKeyPEM: keyPEM)
    }

    /// What `write` puts into a memory BIO, nil when it fails.
    private static func pem(_ write: (OpaquePointer) -> Bool) -> [UInt8]? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard write(bio) else { return nil }
        var start: UnsafeMutablePointer<CChar>?
        let count = pushd_openssl_bio_get_mem_data(bio, &start)
        guard count > 0, let start else { return nil }
        return start.withMemoryRebound(to: UInt8.self, capacity: count) { Array(UnsafeBufferPointer(start: $0, count: count)) }
    }

    /// Every certificate of a PEM bundle (a CA file, `apns.ca_file`); at least one is required.
    public static func inspectAuthorities(_ bytes: [UInt8], source: String) throws(ClientCertificateError) -> [ClientCertificateInfo] {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        var found = [ClientCertificateInfo]()
        var failure: ClientCertificateError?
        bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return }
            defer { BIO_free(bio) }
            while let cert = PEM_read_bio_X509(bio, nil, nil, nil) {
                defer { X509_free(cert) }
                do throws(ClientCertificateError) {
                    found.append(try describe(cert: cert, source: source))
                } catch {
                    failure = error
                    return
                }
            }
        }
        // Reading stops with a "no start line" error at the end of the input; that is not a problem.
        ERR_clear_error()
        if let failure { throw failure }
        guard !found.isEmpty else { throw ClientCertificateError("\(source) holds no PEM certificate") }
        return found
    }

    /// The certificates of the CA file at `path` (`apns.ca_file`), read as libcurl reads it when
    /// it opens a connection: throws when the file is missing, not a regular file, unreadable
    /// or holds no PEM certificate. Expiry is not judged here (`pushd check-config` does).
    public static func loadAuthorities(path: String) throws(ClientCertificateError) -> [ClientCertificateInfo] {
        try inspectAuthorities(try read(path, what: "CA file", limit: maximumAuthoritiesFileSize), source: path)
    }

    /// A CA bundle holds many certificates (the system's, some 150, is about 200 KB).
    static let maximumAuthoritiesFileSize = 16 * 1024 * 1024

    private static func read(_ path: String, what: String = "certificate file",
                             limit: Int = maximumFileSize) throws(ClientCertificateError) -> [UInt8] {
        guard let status = FileSystem.status(path) else {
            throw ClientCertificateError("\(what) \(path) does not exist")
        }
        if status.isDirectory { throw ClientCertificateError("\(what) \(path) cannot be read: it is a directory") }
        if !status.isRegularFile {
            throw ClientCertificateError("\(what) \(path) cannot be read: it is not a regular file")
        }
        if status.size > limit {
            throw ClientCertificateError("\(what) \(path) cannot be read: \(status.size) bytes is far too large")
        }
        do {
            return try FileSystem.read(path)
        } catch {
            throw ClientCertificateError("\(what) \(path) cannot be read: \(error.reason)")
        }
    }

    private static func withBIO(_ bytes: [UInt8], _ body: (OpaquePointer) -> OpaquePointer?) -> OpaquePointer? {
        guard bytes.count <= maximumFileSize else { return nil }
        return bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }

    private static func describe(cert: OpaquePointer, source: String) throws(ClientCertificateError) -> ClientCertificateInfo {
        guard let notBefore = date(X509_get0_notBefore(cert)), let notAfter = date(X509_get0_notAfter(cert)) else {
            throw ClientCertificateError("the certificate in \(source) has an unreadable validity period")
        }
        let subject = X509_get_subject_name(cert)
        var oneLine = "(no subject)"
        if let subject, let text = X509_NAME_oneline(subject, nil, 0) {
            oneLine = String(cString: text)
            pushd_openssl_free(text)
        }
        let commonName = subject.flatMap { nameEntry($0, nid: NID_commonName) }
        let userID = subject.flatMap { nameEntry($0, nid: NID_userId) }
        var environments = Set<APNsEnvironment>()
        if extensionData(cert, oid: developmentOID) != nil { environments.insert(.sandbox) }
        if extensionData(cert, oid: productionOID) != nil { environments.insert(.production) }
        var topics = extensionData(cert, oid: topicsOID).map(topLevelUTF8Strings) ?? []
        if topics.isEmpty, let userID { topics = [userID] }
        return ClientCertificateInfo(
            subject: oneLine, commonName: commonName, userID: userID, notBefore: notBefore, notAfter: notAfter,
            environments: environments, topics: topics)
    }

    private static func nameEntry(_ name: OpaquePointer, nid: Int32) -> String? {
        let index = X509_NAME_get_index_by_NID(name, nid, -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index), let data = X509_NAME_ENTRY_get_data(entry) else { return nil }
        var out: UnsafeMutablePointer<UInt8>?
        let length = ASN1_STRING_to_UTF8(&out, data)
        guard length >= 0, let out else { return nil }
        defer { pushd_openssl_free(out) }
        return String(decoding: UnsafeBufferPointer(start: out, count: Int(length)), as: UTF8.self)
    }

    private static func extensionData(_ cert: OpaquePointer, oid: String) -> [UInt8]? {
        guard let object = OBJ_txt2obj(oid, 1) else { return nil }
        defer { ASN1_OBJECT_free(object) }
        let index = X509_get_ext_by_OBJ(cert, object, -1)
        guard index >= 0, let ext = X509_get_ext(cert, index), let data = X509_EXTENSION_get_data(ext) else { return nil }
        let length = Int(ASN1_STRING_length(data))
        guard length >= 0, let bytes = ASN1_STRING_get0_data(data) else { return [] }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Timestamp? {
        var parts = tm()
        guard let time, ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        return Timestamp(timeIntervalSince1970: Double(timegm(&parts)))
    }

    /// The UTF8String elements directly inside the outer DER SEQUENCE of the topics extension
    /// (each topic is followed by a SEQUENCE naming its kinds, which is skipped).
    static func topLevelUTF8Strings(_ der: [UInt8]) -> [String] {
        var i = 0
        guard der.count >= 2, der[0] == 0x30 else { return [] }
        i = 1
        guard let outer = readLength(der, &i), i + outer <= der.count else { return [] }
        let end = i + outer
        var strings = [String]()
        while i < end {
            let tag = der[i]
            i += 1
            guard let length = readLength(der, &i), i + length <= end else { return strings }
            if tag == 0x0C { strings.append(String(decoding: der[i..<(i + length)], as: UTF8.self)) }
            i += length
        }
        return strings
    }

    private static func readLength(_ der: [UInt8], _ i: inout Int) -> Int? {
        guard i < der.count else { return nil }
        let first = der[i]
        i += 1
        if first < 0x80 { return Int(first) }
        let count = Int(first & 0x7F)
        guard count >= 1, count <= 3, i + count <= der.count else { return nil }
        var length = 0
        for _ in 0..<count {
            length = length << 8 | Int(der[i])
            i += 1
        }
        return length
    }
}

/// A certificate, key or bundle that cannot be used; the message names the file, never key material.
public struct ClientCertificateError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Which setting to fix.
    public enum Part: Sendable, Hashable { case certificate, key, password }

    public var part: Part
    public var description: String

    public init(_ description: String, in part: Part = .certificate) {
        self.description = description
        self.part = part
    }
}
