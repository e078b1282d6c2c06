/// What a transport failure says about where the fault lies: in the network (wait it out) or
/// in the TLS setup on either side (no retry fixes it; an operator must).
///
/// Decided from libcurl's result code and, where one code covers both kinds (a TLS handshake
/// that failed because a packet was lost, or because the server sent an alert about our
/// certificate), from the text libcurl and OpenSSL put in the message. CURLcode values are
/// stable across libcurl releases; OpenSSL's alert descriptions are the RFC 8446 names.
public enum TransportFailureKind: String, Sendable, Equatable, CaseIterable {
    /// No answer: the host could not be resolved or reached, the connection dropped, the
    /// request timed out. APNs or the path to it is down; sending resumes when it is back.
    case unreachable
    /// The server's certificate failed verification: an untrusted CA, a host-name mismatch,
    /// an expired certificate.
    case serverCertificateUntrusted
    /// The CA certificates to verify the server with could not be loaded: the CA file is gone,
    /// unreadable or holds no certificate (libcurl reads it when it opens a connection, not
    /// when the client is set up). Nothing is known of the server's certificate.
    case trustStoreUnusable
    /// The client certificate could not be used: the server refused it (a TLS alert such as
    /// unknown_ca, bad_certificate or certificate_required), or libcurl could not load it.
    case clientCertificateRefused

    /// libcurl result codes the decision depends on.
    enum Code {
        static let sslConnectError = 35
        static let sslEngineNotFound = 53
        static let sslEngineSetFailed = 54
        static let sendError = 55
        static let receiveError = 56
        static let sslCertificateProblem = 58
        static let sslCipher = 59
        static let peerFailedVerification = 60
        static let sslEngineInitFailed = 66
        static let sslCACertificateBadFile = 77
        static let sslCRLBadFile = 82
        static let sslIssuerError = 83
        static let sslPinnedPublicKeyMismatch = 90
        static let sslInvalidCertificateStatus = 91
        static let sslClientCertificate = 98
    }

    public init(_ error: TransportError) {
        self = Self.classify(code: error.code, message: error.message)
    }

    /// A failure that retrying cannot fix: the app's sending should pause until the
    /// configuration (or the server's certificate) is fixed.
    public var isConfigurationError: Bool { self != .unreachable }

    /// One line for an operator: what failed and what to look at.
    public var explanation: String {
        switch self {
        case .unreachable:
            return "APNs could not be reached"
        case .serverCertificateUntrusted:
            return "the APNs server's TLS certificate failed verification (untrusted CA, host-name mismatch or expired certificate): check apns.host, apns.ca_file and the system's CA certificates"
        case .trustStoreUnusable:
            return "the CA certificates to verify the APNs server with could not be loaded: check that apns.ca_file (else the system's CA bundle) exists, is readable and holds PEM certificates"
        case .clientCertificateRefused:
            return "the app's TLS client certificate was refused or could not be used: check its certificate, key and environment"
        }
    }

    static func classify(code: Int, message: String) -> TransportFailureKind {
        switch code {
        case Code.peerFailedVerification, Code.sslCRLBadFile, Code.sslIssuerError,
             Code.sslPinnedPublicKeyMismatch, Code.sslInvalidCertificateStatus:
            return .serverCertificateUntrusted
        case Code.sslCACertificateBadFile:
            return .trustStoreUnusable
        case Code.sslCertificateProblem, Code.sslClientCertificate, Code.sslEngineNotFound, Code.sslEngineSetFailed,
             Code.sslEngineInitFailed:
            return .clientCertificateRefused
        case Code.sslConnectError, Code.sslCipher, Code.sendError, Code.receiveError:
            // One code for a handshake cut by the network and one refused by a peer: only
            // the message tells them apart. TLS 1.3 sends the server's verdict on a client
            // certificate after the client's handshake is done, so that alert arrives on
            // the first read or write rather than during the handshake.
            return classify(message: message)
        default:
            return .unreachable
        }
    }

    private static func classify(message: String) -> TransportFailureKind {
        let text = Array(message.lowercased().utf8)
        let serverRefusals = ["certificate verify failed", "ssl certificate problem",
                              "no alternative certificate subject name matches", "does not match target host"]
        if serverRefusals.contains(where: { contains(text, $0) }) {
            return .serverCertificateUntrusted
        }
        // Alerts a server sends when it rejects the client's certificate (RFC 8446 §6.2).
        let clientAlerts = ["alert unknown ca", "alert bad certificate", "alert certificate required",
                            "alert certificate unknown", "alert certificate revoked", "alert certificate expired",
                            "alert unsupported certificate", "alert access denied"]
        if clientAlerts.contains(where: { contains(text, $0) }) {
            return .clientCertificateRefused
        }
        return .unreachable
    }

    /// Whether `phrase` occurs in `text`. The engine's modules search text with the standard
    /// library alone: `String.contains(String)` comes from _StringProcessing, whose libraries
    /// (with _RegexParser) were 0.8 MB of the engine's resident memory for this one use.
    private static func contains(_ text: [UInt8], _ phrase: String) -> Bool {
        let needle = Array(phrase.utf8)
        guard !needle.isEmpty, needle.count <= text.count else { return needle.isEmpty }
        for start in 0...(text.count - needle.count) where text[start] == needle[0] {
            if text[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}
