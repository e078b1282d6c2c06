import APNsMock
@testable import Dispatcher
import Foundation
import Testing
@testable import pushd

/// The real `pushd send` against an apns-mock that refuses the app's client certificate without
/// letting an alert be read: it says what `pushd run` says (`CertificateRefusalHint`) under the
/// transport error, and exits 1. A token app whose connections end the same way gets no hint.
@Suite struct SendCertificateRefusalTests {
    static let token = String(repeating: "ab", count: 32)

    /// A mock whose client CA is not the one that issued the client certificate `send` uses,
    /// refusing it as `refuse` says; the configuration of a certificate app pointing at it.
    static func withRefusingMock(_ refuse: (inout MockConfiguration) -> Void,
                                 _ body: (APNsMockServer, String) throws -> Void) throws {
        let certificates = try SendCommandTests.certificates.get()
        let files = try FileFixture()
        let other = try CertificateGenerator.generate(into: files.path("other"))
        var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate, privateKeyFile: certificates.serverKey)
        configuration.authentication = .certificate(clientCAFile: other.caCertificate)
        refuse(&configuration)
        let server = try APNsMockServer(configuration: configuration)
        let port = try server.start()
        defer { server.stop() }
        var setup = try SendCommandTests.Setup()
        try setup.writeConfig(port: port, credentials: """
                certificate:
                  cert_file: \(certificates.clientCertificate)
                  key_file: \(certificates.clientKey)
            """)
        try body(server, setup.config)
    }

    @Test func aCertificateRefusedByAResetAfterTheHandshakeIsNamed() throws {
        try Self.withRefusingMock({ $0.refusedCertificateReset = true }) { server, config in
            let run = try PushdBinary.run(["send", "--config", config, "--token", Self.token, "--alert", "Hello"])
            print("pushd send, reset after the handshake:\n\(run.output)\(run.errors)")
            #expect(run.status == 1)
            let lines = run.output.split(separator: "\n").map(String.init)
            #expect(lines.dropFirst().first?.hasPrefix("not sent: ") == true, "\(run.output)")
            #expect(lines.last == "  " + CertificateRefusalHint.text, "\(run.output)")
            #expect(server.stats.clientCertificatesRefused >= 1)
            #expect(server.stats.accepted == 0)
        }
    }

    @Test func aCertificateRefusedByAResetInsideATLS12HandshakeIsNamed() throws {
        try Self.withRefusingMock({
            $0.refusedCertificateHandshakeReset = true
            $0.maximumTLSVersion = .tls12
        }) { server, config in
            let run = try PushdBinary.run(["send", "--config", config, "--token", Self.token, "--alert", "Hello"])
            print("pushd send, reset inside a TLS 1.2 handshake:\n\(run.output)\(run.errors)")
            #expect(run.status == 1)
            let lines = run.output.split(separator: "\n").map(String.init)
            #expect(lines.dropFirst().first?.hasPrefix("not sent: transport error 35: ") == true, "\(run.output)")
            #expect(lines.dropFirst().first?.contains("Connection reset by peer") == true, "\(run.output)")
            #expect(lines.last == "  \(CertificateRefusalHint.duringHandshake); \(CertificateRefusalHint.hypothesis)", "\(run.output)")
            #expect(server.stats.clientCertificatesRefused >= 1)
            #expect(server.stats.accepted == 0)
        }
    }

    /// A TLS 1.2 alert is read inside the handshake: a refusal for certain, said as such.
    @Test func aTLS12AlertIsExplainedAsARefusedCertificate() throws {
        try Self.withRefusingMock({ $0.maximumTLSVersion = .tls12 }) { server, config in
            let run = try PushdBinary.run(["send", "--config", config, "--token", Self.token, "--alert", "Hello"])
            print("pushd send, alert inside a TLS 1.2 handshake:\n\(run.output)\(run.errors)")
            #expect(run.status == 1)
            let lines = run.output.split(separator: "\n").map(String.init)
            #expect(lines.dropFirst().first?.contains("alert unknown ca") == true, "\(run.output)")
            #expect(lines.last == "  " + TransportFailureKind.clientCertificateRefused.explanation, "\(run.output)")
            #expect(!run.output.contains(CertificateRefusalHint.hypothesis), "\(run.output)")
        }
    }

    /// A token app whose connections are reset before any answer: the same transport error,
    /// no word of a certificate.
    @Test func aTokenAppWhoseConnectionsAreResetGetsNoCertificateHint() throws {
        var setup = try SendCommandTests.Setup()
        try SendCommandTests.withMock(&setup, faults: FaultConfiguration(resetRate: 1)) { server, setup in
            let run = try PushdBinary.run(["send", "--config", setup.config, "--token", Self.token, "--alert", "Hello"])
            print("pushd send, token app, connections reset:\n\(run.output)\(run.errors)")
            #expect(run.status == 1)
            let lines = run.output.split(separator: "\n").map(String.init)
            #expect(lines.count == 2, "\(run.output)")
            #expect(lines.last?.hasPrefix("not sent: ") == true, "\(run.output)")
            #expect(!run.output.contains("certificate"), "\(run.output)")
            #expect(server.stats.connectionsReset >= 1, "\(server.stats)")
        }
    }

    /// The hint follows the app's credentials: the same failures, flagged by the engine, get
    /// it for a certificate app and not for a token app.
    @Test func theHintIsForCertificateAppsOnly() {
        var error = TransportError(code: 56, message: "Recv failure: Connection reset by peer")
        error.endedAfterHandshake = true
        let failed = DispatchResult(tag: 1, outcome: .transportFailure(error), latencyNanoseconds: 1_000_000, attempts: 3)
        let plain = "not sent: transport error 56: Recv failure: Connection reset by peer (after 3 attempts, 1 ms)"
        #expect(SendCommand.describe(failed, certificateApp: false) == ([plain], 1))
        #expect(SendCommand.describe(failed, certificateApp: true) == ([plain, "  " + CertificateRefusalHint.text], 1))

        var notSent = NotSent(consecutiveFailures: 3, lastFailure: "Recv failure: Connection reset by peer (libcurl error 35)")
        notSent.lastFailureEndedDuringHandshakeAfterClientCertificate = true
        let handedBack = DispatchResult(tag: 1, outcome: .notSent(notSent), latencyNanoseconds: 1_000_000, attempts: 1)
        let line = "\(notSent) (after 1 attempt, 1 ms)"
        #expect(SendCommand.describe(handedBack, certificateApp: false) == ([line], 1))
        #expect(SendCommand.describe(handedBack, certificateApp: true)
                == ([line, "  \(CertificateRefusalHint.duringHandshake); \(CertificateRefusalHint.hypothesis)"], 1))
    }
}
