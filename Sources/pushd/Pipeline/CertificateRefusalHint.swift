
/// What pushd adds to the failure of a connection of an app authenticated by client
/// certificate that completed its TLS handshake and then ended before answering anything.
///
/// With TLS 1.3 the server checks the client's certificate after the client considers the
/// handshake done. APNs refusing a certificate (revoked, expired, issued for the other
/// environment) sends a TLS alert, which libcurl reports and pushd pauses the app for
/// (`TransportFailureKind.clientCertificateRefused`); but a server that closes or resets the
/// connection before the client has read that alert leaves libcurl only "Connection reset by
/// peer", which reads as APNs going down. pushd names the certificate as the likely cause and
/// does not pause the app on it: a server going down ends connections the same way, and only
/// the alert tells the two apart (docs/operations.md, "APNs outage of an app").
enum CertificateRefusalHint {
    static let text = "the server closed the connection after the TLS handshake, before any answer; "
        + "for an app authenticated by client certificate this is how APNs refusing the certificate "
        + "(revoked, expired, or issued for the other environment) can look: check the certificate "
        + "(pushd check-config); if apps with other credentials fail alike, APNs or the path to it is down instead"

    /// `failure` with the hint when it applies: a certificate app and a connection that ended
    /// after its handshake without answering.
    static func explain(_ failure: String, certificateApp: Bool, endedAfterHandshake: Bool) -> String {
        certificateApp && endedAfterHandshake ? "\(failure); \(text)" : failure
    }
}
