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
    /// Sends `connections` × `ConnectionChurn.fewAnswers` requests one after another to a mock
    /// that ends every connection with a GOAWAY after that many streams, so each few go on a new
    /// connection (fewer answers a connection would be churn, which the loop backs off from);
    /// returns the mock's stats.
    static func sendOnNewConnections(_ connections: Int, credential: ClientCredential?,
                                     tlsVersion: MockTLSVersion) async throws -> MockStats {
        let perConnection = ConnectionChurn.fewAnswers
        return try await withMock({ configuration, material in
            if credential != nil {
                configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            }
            configuration.maximumTLSVersion = tlsVersion
            configuration.faults = FaultConfiguration(goawayAfterStreams: perConnection)
        }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            if let credential { configuration.credential = credential }
            let dispatcher = try HTTP2Dispatcher(configuration: configuration)
            defer { dispatcher.shutdown() }
            for seed in 0..<(connections * perConnection) {
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
        let stats = try await Self.sendOnNewConnections(6, credential: try Self.clientCertificate(material), tlsVersion: tlsVersion)
        print("certificate app, \(tlsVersion), 6 connections: \(stats.handshakesResumed) handshakes resumed")
        #expect(stats.accepted == 6 * ConnectionChurn.fewAnswers)
        #expect(stats.connectionsAccepted == 6, "\(stats)")
        // Only the first handshake runs in full.
        #expect(stats.handshakesResumed == 5, "\(stats)")
    }

    @Test(arguments: [MockTLSVersion.tls13, .tls12])
    func aReconnectingTokenAppResumesItsTLSSession(tlsVersion: MockTLSVersion) async throws {
        let stats = try await Self.sendOnNewConnections(6, credential: nil, tlsVersion: tlsVersion)
        print("token app, \(tlsVersion), 6 connections: \(stats.handshakesResumed) handshakes resumed")
        #expect(stats.accepted == 6 * ConnectionChurn.fewAnswers)
        #expect(stats.connectionsAccepted == 6, "\(stats)")
        #expect(stats.handshakesResumed == 5, "\(stats)")
    }
}
