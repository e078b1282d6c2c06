import APNs
import APNsMock
@testable import Dispatcher
import Testing

/// A loop that reconnects resumes its TLS session (libcurl keeps the sessions of a multi
/// handle's connections in its cache, keyed on the TLS settings: docs/dispatcher.md, "TLS
/// session reuse"). For a certificate app the engine installs an SSL_CTX callback to watch the
/// handshake; libcurl leaves that callback out of the cache key, so its connections resume as
/// a token app's do, and a resumed handshake sends no certificate and signs nothing.
@Suite struct TLSSessionResumptionMockTests {
    /// Sends `total` requests one after another to a mock that ends every connection with a
    /// GOAWAY after one stream, so each goes on a new connection; returns the mock's stats.
    static func sendEachOnANewConnection(_ total: Int, credential: ClientCredential?,
                                         tlsVersion: MockTLSVersion) async throws -> MockStats {
        try await withMock({ configuration, material in
            if credential != nil {
                configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            }
            configuration.maximumTLSVersion = tlsVersion
            configuration.faults = FaultConfiguration(goawayAfterStreams: 1)
        }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            if let credential { configuration.credential = credential }
            let dispatcher = try HTTP2Dispatcher(configuration: configuration)
            defer { dispatcher.shutdown() }
            for seed in 0..<total {
                let result = await dispatcher.send(try unauthenticatedRequest(seed))
                #expect(result.response?.status == 200, "\(result)")
            }
            return server.stats
        }
    }

    static func clientCertificate(_ material: MockMaterial) throws -> ClientCredential {
        try material.clientCredential()
    }

    @Test(arguments: [MockTLSVersion.tls13, .tls12])
    func aReconnectingCertificateAppResumesItsTLSSession(tlsVersion: MockTLSVersion) async throws {
        let material = try MockMaterial.get()
        let stats = try await Self.sendEachOnANewConnection(6, credential: try Self.clientCertificate(material), tlsVersion: tlsVersion)
        print("certificate app, \(tlsVersion), 6 connections: \(stats.handshakesResumed) handshakes resumed")
        #expect(stats.accepted == 6)
        #expect(stats.connectionsAccepted == 6, "\(stats)")
        // Only the first handshake runs in full.
        #expect(stats.handshakesResumed == 5, "\(stats)")
    }

    @Test(arguments: [MockTLSVersion.tls13, .tls12])
    func aReconnectingTokenAppResumesItsTLSSession(tlsVersion: MockTLSVersion) async throws {
        let stats = try await Self.sendEachOnANewConnection(6, credential: nil, tlsVersion: tlsVersion)
        print("token app, \(tlsVersion), 6 connections: \(stats.handshakesResumed) handshakes resumed")
        #expect(stats.accepted == 6)
        #expect(stats.connectionsAccepted == 6, "\(stats)")
        #expect(stats.handshakesResumed == 5, "\(stats)")
    }
}
