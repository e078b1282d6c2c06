import APNs
import Posix
import APNsMock
import Dispatcher
import Foundation
import Testing

/// apns-mock's CA, server and client certificates plus one provider key, made once per process.
struct MockMaterial: Sendable {
    let certificates: GeneratedCertificates
    let providerKeyFile: String
    let providerPublicKeyPEM: String
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"

    static let shared: Result<MockMaterial, TestServerError> = {
        do throws(TestServerError) { return .success(try make()) } catch { return .failure(error) }
    }()

    static func get() throws -> MockMaterial { try shared.get() }

    private static func make() throws(TestServerError) -> MockMaterial {
        let directory = NSTemporaryDirectory() + "pushd-dispatcher-mock-\(getpid())"
        let certificates: GeneratedCertificates
        do {
            certificates = try CertificateGenerator.generate(into: directory, openssl: try executablePath("openssl"))
        } catch {
            throw .launchFailed("apns-mock certificates: \(error)")
        }
        let keyFile = directory + "/provider.p8"
        let publicFile = directory + "/provider.pub.pem"
        try TestCertificates.run(executablePath("openssl"), ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile])
        try TestCertificates.run(executablePath("openssl"), ["pkey", "-in", keyFile, "-pubout", "-out", publicFile])
        chmod(keyFile, 0o600)
        guard let publicPEM = try? String(contentsOfFile: publicFile, encoding: .utf8) else { throw .launchFailed("reading \(publicFile)") }
        return MockMaterial(certificates: certificates, providerKeyFile: keyFile, providerPublicKeyPEM: publicPEM)
    }

    func signingKey() throws -> SigningKey {
        try SigningKey(contentsOfFile: providerKeyFile, keyID: Self.keyID, teamID: Self.teamID)
    }

    /// The mock's client certificate and key, loaded as pushd loads them.
    func clientCredential() throws -> ClientCredential {
        .certificate(try ClientCertificate.load(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey))
    }

    var trustedKey: ProviderKey { ProviderKey(keyID: Self.keyID, teamID: Self.teamID, publicKeyPEM: providerPublicKeyPEM) }
}

/// Starts apns-mock on a free port of 127.0.0.1 for the duration of `body`.
func withMock<T>(_ configure: (inout MockConfiguration, MockMaterial) -> Void = { _, _ in },
                 _ body: (APNsMockServer, Int, MockMaterial) async throws -> T) async throws -> T {
    let material = try MockMaterial.get()
    var configuration = MockConfiguration(certificateChainFile: material.certificates.serverCertificate,
                                          privateKeyFile: material.certificates.serverKey)
    configuration.logsAccepted = true
    configure(&configuration, material)
    let server = try APNsMockServer(configuration: configuration)
    let port = try server.start()
    defer { server.stop() }
    return try await body(server, Int(port), material)
}

/// 64 hex characters, distinct per seed.
func deviceToken(_ seed: Int) -> DeviceToken {
    let hex = String(seed, radix: 16)
    return try! DeviceToken(String(repeating: "0", count: 64 - hex.count) + hex)
}

func notification(_ seed: Int, apnsID: APNsID? = APNsID()) -> APNs.Notification {
    APNs.Notification(token: deviceToken(seed), topic: "com.example.app", pushType: .alert, priority: .immediate,
                      apnsID: apnsID, payload: Array(#"{"aps":{"alert":"hello"}}"#.utf8))
}

/// The engine request for `notification(seed)` without authorization (the mock's default
/// configuration accepts that).
func unauthenticatedRequest(_ notification: APNs.Notification) throws -> DispatchRequest {
    try DispatchRequest(path: notification.path, headerLines: notification.headerFields(authorization: nil).map(\.line),
                        body: notification.payload)
}

func unauthenticatedRequest(_ seed: Int) throws -> DispatchRequest {
    try unauthenticatedRequest(notification(seed))
}

/// Engine settings for the mock: its CA trusted, small windows so tests stay quick.
func mockTuning(_ material: MockMaterial, threads: Int = 2, connections: Int = 1, streams: Int = 1000, maxAttempts: Int = 3)
    -> (inout DispatcherConfiguration) -> Void {
    { configuration in
        configuration.trustedCAFile = material.certificates.caCertificate
        configuration.threads = threads
        configuration.connectionsPerThread = connections
        configuration.streamsPerConnection = streams
        configuration.maxOutstanding = threads * connections * streams * 2
        configuration.maxAttempts = maxAttempts
        configuration.connectTimeoutMilliseconds = 5000
        configuration.requestTimeoutMilliseconds = 20_000
        configuration.reconnectBackoff = ReconnectBackoff(initialMilliseconds: 10, maxMilliseconds: 200)
    }
}

/// Sends `total` unauthenticated requests (tags 0..<total) through a new engine set up with
/// `configuration`, waits up to `seconds` for their results and shuts the engine down.
func sendThroughEngine(_ configuration: DispatcherConfiguration, total: Int, seconds: Double = 120,
                       metrics: any DispatcherMetricsHook = NoDispatcherMetrics()) async throws
    -> (statistics: DispatcherStatistics, collector: ResultCollector, seconds: Double) {
    let collector = ResultCollector()
    let engine = try HTTP2Dispatcher(configuration: configuration, metrics: metrics, onResult: collector.handler)
    defer { engine.shutdown() }
    let started = Timestamp()
    try await onOwnThread {
        for tag in 0..<total { engine.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
    }
    #expect(await collector.wait(for: total, seconds: seconds) == total)
    return (engine.statistics, collector, Timestamp().timeIntervalSince(started))
}
