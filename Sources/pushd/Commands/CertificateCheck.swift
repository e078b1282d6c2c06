internal import COpenSSL
import APNs
import Foundation

/// What `check-config` learns from a TLS client certificate or a CA file.
struct CertificateSummary: Sendable, Equatable {
    /// The subject in OpenSSL's one-line form, for example "/UID=com.example.app/CN=Apple Push Services: com.example.app".
    var subject: String
    var notBefore: Date
    var notAfter: Date
}

/// A certificate, key or bundle that cannot be used; the message names the file.
struct CertificateCheckError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Which setting to fix.
    enum Part: Sendable { case certificate, key, password }

    var part: Part
    var description: String
    init(_ description: String, in part: Part = .certificate) {
        self.description = description
        self.part = part
    }
}

/// Loads certificates the way the TLS layer will, without connecting anywhere. Every OpenSSL
/// object is created and freed inside one call; nothing from OpenSSL leaves this file.
enum CertificateCheck {
    /// A PEM certificate and its private key (from `keyPEM`, or from the certificate file
    /// itself when nil), checked to belong together.
    static func pemPair(certificatePEM: [UInt8], certificateSource: String,
                        keyPEM: [UInt8]?, keySource: String?) throws(CertificateCheckError) -> CertificateSummary {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        guard let certificate = withBIO(certificatePEM, { PEM_read_bio_X509($0, nil, nil, nil) }) else {
            throw CertificateCheckError("\(certificateSource) holds no PEM certificate (\(openSSLErrors(default: "no BEGIN CERTIFICATE block")))")
        }
        defer { X509_free(certificate) }
        let keyBytes = keyPEM ?? certificatePEM
        let keyName = keySource ?? certificateSource
        guard let key = withBIO(keyBytes, { PEM_read_bio_PrivateKey($0, nil, { _, _, _, _ in 0 }, nil) }) else {
            let hint = keySource == nil ? "; set key_file when the key is in a file of its own" : ""
            throw CertificateCheckError("\(keyName) holds no unencrypted PEM private key (\(openSSLErrors(default: "no BEGIN PRIVATE KEY block")))\(hint)",
                                        in: keySource == nil ? .certificate : .key)
        }
        defer { EVP_PKEY_free(key) }
        guard X509_check_private_key(certificate, key) == 1 else {
            ERR_clear_error()
            throw CertificateCheckError("the private key in \(keyName) does not belong to the certificate in \(certificateSource)",
                                        in: keySource == nil ? .certificate : .key)
        }
        return try summary(of: certificate, source: certificateSource)
    }

    /// A PKCS#12 bundle: the password opens it, and it holds a certificate and its key.
    static func pkcs12(_ bytes: [UInt8], source: String, password: String?) throws(CertificateCheckError) -> CertificateSummary {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        guard let bundle = withBIO(bytes, { d2i_PKCS12_bio($0, nil) }) else {
            throw CertificateCheckError("\(source) is not a PKCS#12 (.p12) file (\(openSSLErrors(default: "not DER PKCS#12")))")
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
                throw CertificateCheckError("\(source) cannot be opened: \(hint)", in: .password)
            }
        }
        var key: OpaquePointer?
        var certificate: OpaquePointer?
        let parsed = PKCS12_parse(bundle, opensWithNull ? nil : (password ?? ""), &key, &certificate, nil)
        defer {
            if let key { EVP_PKEY_free(key) }
            if let certificate { X509_free(certificate) }
        }
        guard parsed == 1 else {
            throw CertificateCheckError("\(source) cannot be read: \(openSSLErrors(default: "PKCS12_parse failed"))")
        }
        guard let certificate else { throw CertificateCheckError("\(source) holds no certificate") }
        guard let key else { throw CertificateCheckError("\(source) holds a certificate but no private key") }
        guard X509_check_private_key(certificate, key) == 1 else {
            ERR_clear_error()
            throw CertificateCheckError("the private key in \(source) does not belong to its certificate")
        }
        return try summary(of: certificate, source: source)
    }

    /// Every certificate of a PEM bundle (a CA file); at least one is required.
    static func certificateAuthorities(_ bytes: [UInt8], source: String) throws(CertificateCheckError) -> [CertificateSummary] {
        OpenSSLRuntime.initialize()
        ERR_clear_error()
        var summaries = [CertificateSummary]()
        var failure: CertificateCheckError?
        bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return }
            defer { BIO_free(bio) }
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
                defer { X509_free(certificate) }
                do throws(CertificateCheckError) {
                    summaries.append(try summary(of: certificate, source: source))
                } catch {
                    failure = error
                    return
                }
            }
        }
        // Reading stops with a "no start line" error at the end of the input; that is not a problem.
        ERR_clear_error()
        if let failure { throw failure }
        guard !summaries.isEmpty else { throw CertificateCheckError("\(source) holds no PEM certificate") }
        return summaries
    }

    private static func summary(of certificate: OpaquePointer, source: String) throws(CertificateCheckError) -> CertificateSummary {
        guard let notBefore = date(X509_get0_notBefore(certificate)), let notAfter = date(X509_get0_notAfter(certificate)) else {
            throw CertificateCheckError("the certificate in \(source) has an unreadable validity period")
        }
        var subject = "(no subject)"
        if let name = X509_get_subject_name(certificate), let text = X509_NAME_oneline(name, nil, 0) {
            subject = String(cString: text)
            pushd_openssl_free(text)
        }
        return CertificateSummary(subject: subject, notBefore: notBefore, notAfter: notAfter)
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }

    private static func withBIO<T>(_ bytes: [UInt8], _ body: (OpaquePointer) -> T?) -> T? {
        bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }

    private static func openSSLErrors(default fallback: String) -> String {
        var messages = [String]()
        while case let code = ERR_get_error(), code != 0 {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return messages.isEmpty ? fallback : messages.joined(separator: "; ")
    }
}
