import APNs
import APNsMock
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

    @Test func aConnectionResetAfterTheHandshakeIsReportedAsEndedAfterTheHandshakeWithoutAnAlert() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            configuration.refusedCertificateReset = true
        }) { server, port, material in
            let causes = BackoffCauses()
            let collector = ResultCollector()
            // No client certificate: the mock refuses the connection, here by a reset.
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1),
                                                 metrics: causes, onResult: collector.handler)
            defer { dispatcher.shutdown() }
            for tag in 0..<5 { dispatcher.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
            #expect(await collector.wait(for: 5, seconds: 30) == 5)
            let results = Array(collector.snapshot().results.values)
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
