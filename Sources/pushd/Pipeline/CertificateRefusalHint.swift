import Dispatcher

/// What pushd adds to the failure of a connection of an app authenticated by client
/// certificate that the server ended without a word once it could have checked the
/// certificate: after the TLS handshake and before answering anything, or during the
/// handshake after pushd sent the certificate.
///
/// APNs refusing a certificate (revoked, expired, issued for the other environment) sends a
/// TLS alert, which libcurl reports and pushd pauses the app (or holds that environment of an
/// app with a certificate per environment) for
/// (`TransportFailureKind.clientCertificateRefused`). With TLS 1.3 the server checks the
/// client's certificate after the client considers the handshake done, with TLS 1.2 inside
/// the handshake, once the client has sent its certificate; a server that closes or resets
/// the connection at that point before the client has read an alert leaves libcurl only
/// "Connection reset by peer", which reads as APNs going down. pushd names the certificate as
/// the likely cause and does not pause the app on it: a server going down ends connections
/// the same way, and only the alert tells the two apart (docs/operations.md, "APNs outage of
/// an app"). The engine reports the facts (`ConnectionFailureCause.endedAfterHandshake`,
/// `.endedDuringHandshakeAfterClientCertificate`); the words are pushd's.
enum CertificateRefusalHint {
    /// How the connection ended, first in the hint.
    static let afterHandshake = "the server closed the connection after the TLS handshake, before any answer"
    static let duringHandshake = "the server closed the connection during the TLS handshake, after pushd sent its client certificate"
    /// What it may mean and what to check, the same for both.
    static let hypothesis = "for an app authenticated by client certificate this is how APNs refusing the certificate "
        + "(revoked, expired, or issued for the other environment) can look: check the certificate "
        + "(pushd check-config); if apps with other credentials fail alike, APNs or the path to it is down instead"

    /// The hint for a connection that ended after its handshake.
    static var text: String { "\(afterHandshake); \(hypothesis)" }

    /// The hint when it applies: a certificate app, and a connection that ended after its
    /// handshake without answering or was reset during its handshake after the certificate
    /// was sent; nil otherwise.
    static func hint(certificateApp: Bool, endedAfterHandshake: Bool, endedDuringHandshakeAfterClientCertificate: Bool) -> String? {
        guard certificateApp else { return nil }
        if endedAfterHandshake { return "\(afterHandshake); \(hypothesis)" }
        if endedDuringHandshakeAfterClientCertificate { return "\(duringHandshake); \(hypothesis)" }
        return nil
    }

    static func hint(for error: TransportError, certificateApp: Bool) -> String? {
        hint(certificateApp: certificateApp, endedAfterHandshake: error.endedAfterHandshake,
             endedDuringHandshakeAfterClientCertificate: error.endedDuringHandshakeAfterClientCertificate)
    }

    static func hint(for notSent: NotSent, certificateApp: Bool) -> String? {
        hint(certificateApp: certificateApp, endedAfterHandshake: notSent.lastFailureEndedAfterHandshake,
             endedDuringHandshakeAfterClientCertificate: notSent.lastFailureEndedDuringHandshakeAfterClientCertificate)
    }

    /// `failure` followed by the hint, when there is one.
    static func explain(_ failure: String, hint: String?) -> String {
        hint.map { "\(failure); \($0)" } ?? failure
    }

    static func explain(_ failure: String, certificateApp: Bool, endedAfterHandshake: Bool,
                        endedDuringHandshakeAfterClientCertificate: Bool = false) -> String {
        explain(failure, hint: hint(certificateApp: certificateApp, endedAfterHandshake: endedAfterHandshake,
                                    endedDuringHandshakeAfterClientCertificate: endedDuringHandshakeAfterClientCertificate))
    }

    static func explain(_ cause: ConnectionFailureCause, certificateApp: Bool) -> String {
        explain(cause.text, certificateApp: certificateApp, endedAfterHandshake: cause.endedAfterHandshake,
                endedDuringHandshakeAfterClientCertificate: cause.endedDuringHandshakeAfterClientCertificate)
    }
}
