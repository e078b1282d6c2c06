import APNs
import Posix
import APNsMock
import Foundation
import Metrics
import PushdTestSupport
import QueueStore
@testable import pushd

/// A throwaway world for the daemon: a database of its own, an in-process apns-mock with
/// throwaway certificates that trusts a freshly generated ES256 key, and a configuration
/// pointing pushd at both.
final class DaemonHarness: @unchecked Sendable {
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"
    static let bundleID = "com.example.shop"

    let directory: String
    let database: IsolatedDatabase
    let certificates: GeneratedCertificates
    let keyFile: String
    private(set) var mock: APNsMockServer
    let mockPort: UInt16
    private var mockConfiguration: MockConfiguration

    /// - Parameter trustedKeyPEM: the public key the mock trusts for `keyID`; nil trusts pushd's own.
    /// - Parameter allowedBundleIDs: the bundle ids the mock lets pushd's key push to (TopicDisallowed
    ///   for any other); empty allows every one.
    /// - Parameter disallowedTopics: topics the mock refuses (TopicDisallowed) although their bundle id is allowed.
    init(database: IsolatedDatabase, faults: FaultConfiguration = .none, trustsPushdKey: Bool = true,
         maxStreams: Int = 1000, providerTokenUpdateWindowSeconds: Int = 1200, allowedBundleIDs: [String] = [],
         disallowedTopics: [String] = [], maxChannelsPerApp: Int = MockConfiguration.apnsChannelLimit,
         broadcastDisabledBundleIDs: [String] = [], topicMismatchBundleIDs: [String] = [],
         providerTokenMaximumAgeSeconds: Int = 3600) throws {
        self.database = database
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushd-daemon-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        certificates = try CertificateGenerator.generate(into: directory + "/certs")
        keyFile = directory + "/key.p8"
        try Self.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile])
        chmod(keyFile, 0o600)
        var trustedKeyFile = keyFile
        if !trustsPushdKey {
            trustedKeyFile = directory + "/other.p8"
            try Self.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", trustedKeyFile])
        }
        try Self.openssl(["pkey", "-in", trustedKeyFile, "-pubout", "-out", directory + "/trusted.pub"])
        let trusted = try String(contentsOfFile: directory + "/trusted.pub", encoding: .utf8)
        var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate,
                                              privateKeyFile: certificates.serverKey)
        configuration.authentication = .token(keys: [ProviderKey(keyID: Self.keyID, teamID: Self.teamID, publicKeyPEM: trusted)],
                                              startAtOneStream: true)
        configuration.maxConcurrentStreams = maxStreams
        configuration.logsAccepted = true
        configuration.countsPerToken = true
        configuration.faults = faults
        configuration.providerTokenUpdateWindowSeconds = providerTokenUpdateWindowSeconds
        configuration.providerTokenMaximumAgeSeconds = providerTokenMaximumAgeSeconds
        configuration.channelManagementPort = 0
        configuration.allowedBundleIDs = allowedBundleIDs
        configuration.disallowedTopics = disallowedTopics
        configuration.maxChannelsPerApp = maxChannelsPerApp
        configuration.broadcastDisabledBundleIDs = broadcastDisabledBundleIDs
        configuration.topicMismatchBundleIDs = topicMismatchBundleIDs
        mock = try APNsMockServer(configuration: configuration)
        mockPort = try mock.start()
        configuration.port = mockPort
        configuration.channelManagementPort = mock.channelManagementPort
        mockConfiguration = configuration
    }

    /// A new apns-mock on the same port (after `mock.stop()`: APNs back after an outage),
    /// with fresh counters.
    func restartMock() throws {
        mock.stop()
        mock = try APNsMockServer(configuration: mockConfiguration)
        _ = try mock.start()
    }

    /// A new apns-mock on the same port that lets pushd's key push to `allowedBundleIDs` (empty:
    /// any), as APNs does once the key or the bundle id is fixed in the developer account.
    func restartMock(allowedBundleIDs: [String], disallowedTopics: [String] = [], broadcastDisabledBundleIDs: [String] = []) throws {
        mockConfiguration.allowedBundleIDs = allowedBundleIDs
        mockConfiguration.disallowedTopics = disallowedTopics
        mockConfiguration.broadcastDisabledBundleIDs = broadcastDisabledBundleIDs
        try restartMock()
    }

    deinit {
        mock.stop()
        // KEEP_HARNESS=1 keeps the directory (the daemon's log, its configuration) to read after a failure.
        if ProcessInfo.processInfo.environment["KEEP_HARNESS"] == nil { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// pushd's configuration for this world, with short retry and lease times for tests.
    func config() -> PushdConfig {
        var config = PushdConfig(databaseURL: database.url, apps: [
            PushdConfig.App(name: "shop", bundleID: Self.bundleID, environment: .sandbox,
                            credentials: .token(teamID: Self.teamID, keyID: Self.keyID, keyFile: keyFile), campaignRate: nil),
        ])
        config.apns.hostOverride = "127.0.0.1:\(mockPort)"
        config.apns.channelHostOverride = "127.0.0.1:\(mockConfiguration.channelManagementPort ?? 0)"
        config.apns.caFile = certificates.caCertificate
        config.apns.threads = 1
        config.retry.baseDelayMilliseconds = 10
        config.retry.maxDelayMilliseconds = 200
        config.campaignLeaseSeconds = 3
        config.drainTimeoutSeconds = 10
        config.metricsListen = "127.0.0.1:0"
        return config
    }

    /// Gives the campaign leases of the configuration file at `path` (written by
    /// `writeConfigFile`, 3 s) `seconds`: for tests that assert no chunk is leased twice but do
    /// not time a takeover, so a lease keeper held up for 2 s on a loaded machine does not let
    /// the lease run out under its worker.
    static func setLeaseSeconds(_ seconds: Int, inConfigFile path: String) throws {
        let yaml = try String(contentsOfFile: path, encoding: .utf8)
        guard yaml.contains("  lease_s: 3\n") else { throw LeaseSettingMissing(path: path) }
        try yaml.replacingOccurrences(of: "  lease_s: 3\n", with: "  lease_s: \(seconds)\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
    }

    struct LeaseSettingMissing: Error { let path: String }

    /// The same configuration as a YAML file, for the real binary; `extra` is appended as it
    /// is (a `workers:` section, say).
    func writeConfigFile(rate: Int? = nil, appending extra: String = "") throws -> String {
        let path = directory + "/pushd.yml"
        let yaml = """
        database:
          url: \(database.url)
        metrics:
          listen: 127.0.0.1:0
        log:
          level: info
        apns:
          host: 127.0.0.1:\(mockPort)
          channel_host: 127.0.0.1:\(mockConfiguration.channelManagementPort ?? 0)
          ca_file: \(certificates.caCertificate)
          threads: 1
        retry:
          base_delay_ms: 10
          max_delay_ms: 200
        campaigns:
          lease_s: 3
          default_rate: \(rate ?? 0)
        shutdown:
          drain_timeout_s: 5
        apps:
          - name: shop
            bundle_id: \(Self.bundleID)
            environment: sandbox
            token:
              team_id: \(Self.teamID)
              key_id: \(Self.keyID)
              key_file: \(keyFile)
        """
        try (extra.isEmpty ? yaml : yaml + "\n" + extra).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// - Parameter log: where its warning and error lines go (a `MemoryLogSink` to read them); stderr by default.
    func pipeline(_ config: PushdConfig? = nil, instance: String = "test", log: (any LogSink)? = nil) throws -> Pipeline {
        let metrics = try PushdMetrics(version: "test")
        let logger = Logger(level: .warning, sink: log ?? FileLogSink(path: nil))
        return try Pipeline(config: config ?? self.config(), metrics: metrics, logger: logger, instance: instance)
    }

    static func openssl(_ arguments: [String]) throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw CommandContext.Failure("openssl \(arguments.joined(separator: " ")) failed")
        }
    }

    /// Polls `condition` every 50 ms for up to `seconds`; returns whether it became true.
    static func wait(seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Timestamp().addingTimeInterval(seconds)
        while Timestamp() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try condition()
    }

    /// A 64-hex token derived from `seed`.
    static func token(_ seed: Int) -> String {
        var text = String(seed, radix: 16)
        text = String(repeating: "0", count: max(0, 16 - text.count)) + text
        return String(repeating: text, count: 4)
    }

    static func count(_ connection: PGConnection, _ sql: String) throws -> Int {
        try connection.query(sql).require(Int.self, row: 0, column: 0)
    }
}
