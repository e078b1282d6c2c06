import APNs
import APNsMock
@testable import Dispatcher
import Foundation
import Glibc
import Testing

/// A renewed client certificate handed to a running engine (`replaceCertificate`, what pushd's
/// reload does) is what the server sees on the very next request, not only once a connection
/// happens to close: the connection opened with the old one takes no new stream and is closed
/// once its streams are answered, and no TLS session of the old one is resumed with the new.
@Suite struct CertificateReplacementMockTests {
    /// A second client certificate of the mock's CA, with a key and a name of its own.
    static func renewedCertificate(_ material: MockMaterial, name: String) throws -> ClientIdentity {
        let directory = NSTemporaryDirectory() + "pushd-renewed-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let openssl = try executablePath("openssl")
        let key = directory + "/client.key"
        let request = directory + "/client.csr"
        let certificate = directory + "/client.pem"
        let extensions = directory + "/client.ext"
        try "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        try TestCertificates.run(openssl, ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        try TestCertificates.run(openssl, ["req", "-new", "-key", key, "-subj", "/CN=\(name)", "-out", request])
        try TestCertificates.run(openssl, ["x509", "-req", "-in", request, "-CA", material.certificates.caCertificate,
                                           "-CAkey", material.certificates.caKey, "-set_serial", String(UInt32.random(in: 1...UInt32.max)),
                                           "-days", "2", "-sha256", "-extfile", extensions, "-out", certificate])
        return try ClientCertificate.load(certificateFile: certificate, keyFile: key)
    }

    /// Polls `condition` every 20 ms for up to `seconds`.
    static func eventually(seconds: Double, _ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        return condition()
    }

    @Test(arguments: [MockTLSVersion.tls13, .tls12])
    func aReplacedCertificateIsPresentedOnTheNextRequest(tlsVersion: MockTLSVersion) async throws {
        let material = try MockMaterial.get()
        let renewed = try Self.renewedCertificate(material, name: "renewed client")
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            configuration.maximumTLSVersion = tlsVersion
        }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.credential = try material.clientCredential()
            let dispatcher = try HTTP2Dispatcher(configuration: configuration)
            defer { dispatcher.shutdown() }
            for seed in 0..<3 {
                let result = await dispatcher.send(try unauthenticatedRequest(seed))
                #expect(result.response?.status == 200, "\(result)")
            }
            dispatcher.replaceCertificate(renewed)
            for seed in 3..<6 {
                let result = await dispatcher.send(try unauthenticatedRequest(seed))
                #expect(result.response?.status == 200, "\(result)")
            }
            let stats = server.stats
            let subjects = server.acceptedLog.map { stats.clientCertificateSubjects[$0.connectionID] ?? "none" }
            #expect(subjects == Array(repeating: "/CN=apns-mock client", count: 3) + Array(repeating: "/CN=renewed client", count: 3),
                    "\(stats)")
            // The connection of the old certificate was closed by the engine before the new one
            // was opened, not left open idle beside it.
            #expect(await Self.eventually(seconds: 5) { server.stats.connectionsClosed == 1 }, "\(server.stats)")
            #expect(server.stats.connectionsAccepted == 2)
            #expect(server.stats.connectionsOpenPeak == 1, "\(server.stats)")
            #expect(dispatcher.statistics.connectionReplacements == 1)

            // The same certificate again changes nothing.
            dispatcher.replaceCertificate(renewed)
            let again = await dispatcher.send(try unauthenticatedRequest(6))
            #expect(again.response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
            #expect(dispatcher.statistics.connectionReplacements == 1)
        }
    }

    /// Requests already on the wire when the certificate is replaced are answered on the
    /// old connection; the rest go out on a connection opened with the new certificate, and
    /// none is lost or failed.
    @Test func requestsInFlightFinishAndTheRestGoWithTheNewCertificate() async throws {
        let material = try MockMaterial.get()
        let renewed = try Self.renewedCertificate(material, name: "renewed client")
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
            configuration.faults = FaultConfiguration(delayMilliseconds: 300)
        }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.credential = try material.clientCredential()
            let dispatcher = try HTTP2Dispatcher(configuration: configuration)
            defer { dispatcher.shutdown() }
            // A connection that has answered, so that the next requests go out on it together.
            #expect(await dispatcher.send(try unauthenticatedRequest(0)).response?.status == 200)
            let results = try await withThrowingTaskGroup(of: DispatchResult.self) { group in
                for seed in 1...20 { group.addTask { await dispatcher.send(try unauthenticatedRequest(seed)) } }
                try await Task.sleep(nanoseconds: 100_000_000)
                dispatcher.replaceCertificate(renewed)
                for seed in 21...40 { group.addTask { await dispatcher.send(try unauthenticatedRequest(seed)) } }
                var results: [DispatchResult] = []
                for try await result in group { results.append(result) }
                return results
            }
            #expect(results.count == 40)
            #expect(results.allSatisfy { $0.response?.status == 200 }, "\(results.filter { $0.response?.status != 200 })")
            let stats = server.stats
            #expect(stats.accepted == 41)
            #expect(Set(server.acceptedLog.map(\.token)).count == 41)
            let bySubject = Dictionary(grouping: server.acceptedLog) { stats.clientCertificateSubjects[$0.connectionID] ?? "none" }
            #expect(Set(bySubject.keys) == ["/CN=apns-mock client", "/CN=renewed client"], "\(stats)")
            // Everything submitted after the replacement went with the new certificate.
            let renewedTokens = Set(bySubject["/CN=renewed client", default: []].map(\.token))
            for seed in 21...40 { #expect(renewedTokens.contains(deviceToken(seed).hex)) }
        }
    }
}
