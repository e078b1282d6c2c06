import Posix

/// A TLS client certificate with its private key, read once and checked by the one loader
/// (`ClientCertificate.load`): the certificate parses, the key belongs to it. The bytes are
/// PEM as the TLS layer reads them from memory (the certificate, then any chain certificates
/// of its file or bundle; the key unencrypted, PKCS#8), so what a connection presents is what
/// was checked, never what the files hold when a connection is opened later.
///
/// The key material never appears in `description` or in errors.
public struct ClientIdentity: Sendable, Equatable, CustomStringConvertible {
    /// What the certificate says about itself (subject, validity, environments, topics).
    public let info: ClientCertificateInfo
    /// The file (or bundle) it was read from, for messages.
    public let source: String
    /// The file its key was read from when that is another one than `source`.
    public let keySource: String?
    /// SHA-256 of the certificate's DER, lowercase hex: names this exact certificate in logs.
    public let fingerprint: String
    /// The certificate and its chain certificates, PEM.
    public let certificateChainPEM: [UInt8]
    /// The private key, unencrypted PKCS#8 PEM.
    public let privateKeyPEM: [UInt8]

    init(info: ClientCertificateInfo, source: String, keySource: String?, fingerprint: String, certificateChainPEM: [UInt8],
         privateKeyPEM: [UInt8]) {
        self.info = info
        self.source = source
        self.keySource = keySource
        self.fingerprint = fingerprint
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
    }

    /// "certificate /CN=… (SHA-256 ab12…, valid until …) from /etc/pushd/shop.pem".
    public var description: String {
        "certificate \(info.subject) (SHA-256 \(fingerprint.prefix(16))…, valid until \(info.notAfter)) from \(source)"
    }

    /// Why the certificate cannot be used for `environment` at `now`: not yet valid, expired,
    /// or issued for the other environment. Empty when it can.
    public func problems(environment: APNsEnvironment, now: Timestamp = Timestamp()) -> [String] {
        info.problems(environment: environment, topic: nil, now: now)
    }
}
