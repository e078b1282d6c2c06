import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two instances of app `shop` on one database with different credentials (a rolling deploy
/// that adds a certificate or a token key one instance at a time). The harness's mock takes
/// provider tokens; `certificateHosts` are apns-mocks that take the harness's client
/// certificate, one per APNs host a test needs, each with a channel management listener.
final class TwoInstanceFleet: @unchecked Sendable {
    let harness: DaemonHarness
    /// The apns-mocks taking the harness's client certificate, in the order asked for.
    let certificateHosts: [APNsMockServer]
    let certificatePorts: [UInt16]
    private var processes = [ChildProcess]()

    /// - Parameter certificateHosts: how many certificate-taking apns-mocks to start.
    init(database: IsolatedDatabase, certificateHosts count: Int) throws {
        harness = try DaemonHarness(database: database)
        let certificates = harness.certificates
        var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate,
                                              privateKeyFile: certificates.serverKey)
        configuration.authentication = .certificate(clientCAFile: certificates.caCertificate)
        configuration.logsAccepted = true
        configuration.channelManagementPort = 0
        var hosts = [APNsMockServer](), ports = [UInt16]()
        for _ in 0..<count {
            let host = try APNsMockServer(configuration: configuration)
            ports.append(try host.start())
            hosts.append(host)
        }
        certificateHosts = hosts
        certificatePorts = ports
    }

    /// Stops the daemons it started (the last first) and the certificate mocks. Call it from
    /// a `defer`: the fleet's lifetime is not bound to the test's scope.
    func stop() {
        for process in processes.reversed() { Self.stop(process) }
        for host in certificateHosts { host.stop() }
    }

    deinit { stop() }

    /// The configuration file `name` of an instance whose app `shop` has only certificates:
    /// the one for `environment` sent to `host`, and a sandbox one too when asked (sent to
    /// `sandboxHost`). Channel requests go to the management listener of the mock on `host`.
    func writeCertificateConfig(name: String, environment: PushdConfig.Environment, host: UInt16, sandboxHost: UInt16? = nil,
                                sandboxCertificate: Bool = false, campaignLeaseSeconds: Int? = nil) throws -> String {
        let certificates = harness.certificates
        var yaml = """
        database:
          url: \(harness.database.url)
        metrics:
          listen: 127.0.0.1:0
        log:
          level: info
        apns:
          host: 127.0.0.1:\(host)

        """
        if let index = certificatePorts.firstIndex(of: host), let management = certificateHosts[index].channelManagementPort {
            yaml += "  channel_host: 127.0.0.1:\(management)\n"
        }
        if let sandboxHost { yaml += "  sandbox_host: 127.0.0.1:\(sandboxHost)\n" }
        yaml += """
          ca_file: \(certificates.caCertificate)
          threads: 1
        retry:
          base_delay_ms: 10
          max_delay_ms: 200

        """
        if let campaignLeaseSeconds { yaml += "campaigns:\n  lease_s: \(campaignLeaseSeconds)\n" }
        yaml += """
        shutdown:
          drain_timeout_s: 5
        apps:
          - name: shop
            bundle_id: \(DaemonHarness.bundleID)
            environment: \(environment.rawValue)
            certificate:
              cert_file: \(certificates.clientCertificate)
              key_file: \(certificates.clientKey)

        """
        if sandboxCertificate {
            yaml += """
                sandbox_certificate:
                  cert_file: \(certificates.clientCertificate)
                  key_file: \(certificates.clientKey)

            """
        }
        let path = harness.directory + "/" + name
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Starts `pushd run` with `config`, logging to `log`; `stop` stops it.
    func start(config: String, log: String) throws -> ChildProcess {
        let process = try DaemonProcessTests.start(config: config, log: log)
        processes.append(process)
        return process
    }

    /// Starts B and expects `registeredB` (a count query) to find it registered; pauses it
    /// (SIGSTOP) so that its row stays live while it claims nothing; then starts A and expects
    /// both to be registered. `resume` lets B work.
    func startPausedBThenA(configB: String, logB: String, registeredB: String = "SELECT count(*) FROM pushd.instances",
                           configA: String, logA: String, on connection: PGConnection) throws -> (a: ChildProcess, b: ChildProcess) {
        let b = try start(config: configB, log: logB)
        #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, registeredB) == 1 })
        kill(b.processIdentifier, SIGSTOP)
        let a = try start(config: configA, log: logA)
        #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances") == 2 })
        return (a, b)
    }

    static func resume(_ process: ChildProcess) { kill(process.processIdentifier, SIGCONT) }

    /// Stops a daemon, paused or not: SIGCONT, then SIGTERM, and up to 10 s for it to exit.
    static func stop(_ process: ChildProcess) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGCONT)
        kill(process.processIdentifier, SIGTERM)
        _ = DaemonProcessTests.waitForExit(process, seconds: 10)
    }

    static func text(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
}
