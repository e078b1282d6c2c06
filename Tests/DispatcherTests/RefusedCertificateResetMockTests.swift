import APNs
import APNsMock
import Foundation
@testable import Dispatcher
import Locking
import Polling
import Testing

/// A server that refuses the client's certificate by resetting the connection right after a
/// TLS 1.3 handshake (apns-mock's `refusedCertificateReset`) leaves libcurl only "Connection
/// reset by peer", no alert to classify. The engine still says what it knows: each such
/// connection completed its handshake and ended before answering anything, in the results and
/// in the backoff's cause, so that its caller can name the certificate for a certificate app.
@Suite struct RefusedCertificateResetMockTests {
    /// The causes of the backoff runs the engine announced.
    final class BackoffCauses: DispatcherMetricsHook {
        private let recorded = Lock<[ConnectionFailureCause]>([])
        var all: [ConnectionFailureCause] { recorded.withLock { $0 } }
        func reconnectBackoffStarted(_ cause: ConnectionFailureCause, delayMilliseconds: Int) {
            recorded.withLock { $0.append(cause) }
        }
    }

    /// Submits five requests through a new engine with `configuration`, waits for their results
    /// and shuts the engine down; returns the results and the backoff causes it announced.
    static func submitFive(_ configuration: DispatcherConfiguration) async throws -> (results: [DispatchResult], causes: BackoffCauses) {
        let causes = BackoffCauses()
        let collector = ResultCollector()
        let dispatcher = try HTTP2Dispatcher(configuration: configuration, metrics: causes, onResult: collector.handler)
        defer { dispatcher.shutdown() }
        for tag in 0..<5 { dispatcher.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
        #expect(await collector.wait(for: 5, seconds: 30) == 5)
        return (Array(collector.snapshot().results.values), causes)
    }

    @Test func aConnectionResetAfterTheHandshakeIsReportedAsEndedAfterTheHandshakeWithoutAnAlert() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            configuration.refusedCertificateReset = true
        }) { server, port, material in
            // No client certificate: the mock refuses the connection, here by a reset.
            let (results, causes) = try await Self.submitFive(configurationForMock(port: port, material: material, threads: 1))
            for result in results {
                if let error = result.transportError {
                    #expect(error.endedAfterHandshake, "\(error)")
                    // No alert reached the client: nothing to tell it from a network failure.
                    #expect(TransportFailureKind(error) == .unreachable, "\(error)")
                } else if let notSent = result.notSent {
                    #expect(notSent.lastFailureEndedAfterHandshake, "\(notSent)")
                } else {
                    Issue.record("an answer from a server that refuses every connection: \(result)")
                }
            }
            print("reset after the handshake: \(results.map { $0.transportError.map(\.description) ?? $0.notSent.map(\.description) ?? "" })")
            let first = try #require(causes.all.first)
            #expect(first.endedAfterHandshake, "\(first)")
            #expect(first.text.contains("ended before answering anything"), "\(first)")
            #expect(server.stats.clientCertificatesRefused >= 1)
            #expect(server.stats.accepted == 0)
        }
    }

    /// The default refusal sends the TLS alert and lets the client read it: classified as a
    /// refused client certificate, as before.
    @Test func theDefaultRefusalLetsTheClientReadTheAlert() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
        }) { server, port, material in
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1, maxAttempts: 1))
            defer { dispatcher.shutdown() }
            let refused = await dispatcher.send(try unauthenticatedRequest(1))
            let error = try #require(refused.transportError)
            #expect(TransportFailureKind(error) == .clientCertificateRefused, "\(error)")
            // The mock counts the refusal once OpenSSL has written the alert: the client may read it first.
            let deadline = monotonicNanoseconds() + 5_000_000_000
            while server.stats.clientCertificatesRefused == 0, monotonicNanoseconds() < deadline {
                try await Task.sleep(nanoseconds: 2_000_000)
            }
            #expect(server.stats.clientCertificatesRefused >= 1)
        }
    }
}

/// With TLS 1.2 the server checks the client's certificate inside the handshake, before its
/// own Finished. A server that refuses it by resetting the connection there (apns-mock's
/// `refusedCertificateHandshakeReset` with `maximumTLSVersion` 1.2) leaves libcurl error 35
/// and "Connection reset by peer", the handshake not done. The engine reports that the reset
/// came during the handshake after it had sent its certificate, and only then.
@Suite struct RefusedCertificateHandshakeResetMockTests {
    /// A CA of its own, so the mock can refuse the fixture's client certificate.
    static func otherCA() throws -> (certificates: GeneratedCertificates, directory: String) {
        let directory = NSTemporaryDirectory() + "pushd-other-ca-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        return (try CertificateGenerator.generate(into: directory), directory)
    }

    static func certificateConfiguration(port: Int, material: MockMaterial, maxAttempts: Int = 3) throws -> DispatcherConfiguration {
        var configuration = configurationForMock(port: port, material: material, threads: 1, maxAttempts: maxAttempts)
        configuration.credential = try material.clientCredential()
        return configuration
    }

    @Test func aResetInsideATLS12HandshakeAfterTheClientCertificateIsReportedAsSuch() async throws {
        let other = try Self.otherCA()
        defer { try? FileManager.default.removeItem(atPath: other.directory) }
        try await withMock({ configuration, _ in
            configuration.authentication = .certificate(clientCAFile: other.certificates.caCertificate)
            configuration.refusedCertificateHandshakeReset = true
            configuration.maximumTLSVersion = .tls12
        }) { server, port, material in
            let (results, causes) = try await RefusedCertificateResetMockTests.submitFive(
                try Self.certificateConfiguration(port: port, material: material))
            for result in results {
                if let error = result.transportError {
                    #expect(error.code == 35, "\(error)")
                    #expect(error.endedDuringHandshakeAfterClientCertificate, "\(error)")
                    #expect(!error.endedAfterHandshake, "\(error)")
                    // No alert reached the client: nothing to tell it from a network failure.
                    #expect(TransportFailureKind(error) == .unreachable, "\(error)")
                } else if let notSent = result.notSent {
                    #expect(notSent.lastFailureEndedDuringHandshakeAfterClientCertificate, "\(notSent)")
                    #expect(!notSent.lastFailureEndedAfterHandshake, "\(notSent)")
                } else {
                    Issue.record("an answer from a server that refuses every connection: \(result)")
                }
            }
            print("reset inside a TLS 1.2 handshake: \(results.map { $0.transportError.map(\.description) ?? $0.notSent.map(\.description) ?? "" })")
            let first = try #require(causes.all.first)
            #expect(first.endedDuringHandshakeAfterClientCertificate, "\(first)")
            #expect(!first.endedAfterHandshake, "\(first)")
            #expect(first.text.contains("Connection reset by peer") && first.text.contains("libcurl error 35"), "\(first)")
            #expect(server.stats.clientCertificatesRefused >= 1)
            #expect(server.stats.accepted == 0)
        }
    }

    /// The alert of a TLS 1.2 server that refuses the certificate the usual way is read inside
    /// the handshake and classified as a refused client certificate; no reset is reported.
    @Test func aTLS12AlertIsARefusedCertificateNotAReset() async throws {
        let other = try Self.otherCA()
        defer { try? FileManager.default.removeItem(atPath: other.directory) }
        try await withMock({ configuration, _ in
            configuration.authentication = .certificate(clientCAFile: other.certificates.caCertificate)
            configuration.maximumTLSVersion = .tls12
        }) { server, port, material in
            let dispatcher = try HTTP2Dispatcher(configuration: try Self.certificateConfiguration(port: port, material: material, maxAttempts: 1))
            defer { dispatcher.shutdown() }
            let refused = await dispatcher.send(try unauthenticatedRequest(1))
            let error = try #require(refused.transportError)
            print("alert inside a TLS 1.2 handshake: \(error)")
            #expect(error.code == 35, "\(error)")
            #expect(TransportFailureKind(error) == .clientCertificateRefused, "\(error)")
            #expect(!error.endedDuringHandshakeAfterClientCertificate && !error.endedAfterHandshake, "\(error)")
            #expect(server.stats.clientCertificatesRefused >= 1)
        }
    }

    /// A certificate the server takes: the engine's watch on the handshake changes nothing,
    /// and the requests share one connection.
    @Test func anAcceptedCertificateSendsOnOneConnectionUnderTLS12() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            configuration.maximumTLSVersion = .tls12
            configuration.refusedCertificateHandshakeReset = true
        }) { server, port, material in
            let collector = ResultCollector()
            let dispatcher = try HTTP2Dispatcher(configuration: try Self.certificateConfiguration(port: port, material: material),
                                                 onResult: collector.handler)
            defer { dispatcher.shutdown() }
            for tag in 0..<20 { dispatcher.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
            #expect(await collector.wait(for: 20, seconds: 30) == 20)
            #expect(collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
            #expect(server.stats.accepted == 20)
            #expect(server.stats.connectionsAccepted == 1, "\(server.stats)")
        }
    }
}
