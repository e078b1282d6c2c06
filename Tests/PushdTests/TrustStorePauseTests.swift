import Dispatcher
import Testing
@testable import pushd

/// CA certificates libcurl could not load as it opened a connection (libcurl error 77) pause
/// the app for 30 s at a time: a CA file caught being rewritten more likely than one that
/// stays bad. Every other pause lasts 5 minutes (or until SIGHUP).
@Suite struct TrustStorePauseTests {
    @Test func unusableCACertificatesPauseForThirtySecondsAndOtherReasonsForTheUsualTime() {
        let unusable = TransportFailureKind.trustStoreUnusable.explanation + " (libcurl error 77: error setting certificate file: /etc/pushd/ca.pem)"
        #expect(PipelineContext.pauseSeconds(reason: unusable, otherwise: 300) == PipelineContext.trustStorePauseSeconds)
        #expect(PipelineContext.trustStorePauseSeconds == 30)
        let untrusted = TransportFailureKind.serverCertificateUntrusted.explanation + " (libcurl error 60: SSL certificate problem)"
        for reason in [untrusted, "InvalidProviderToken", "BadCertificate"] {
            #expect(PipelineContext.pauseSeconds(reason: reason, otherwise: 300) == 300, "\(reason)")
        }
    }
}
