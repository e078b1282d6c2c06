import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Apple recommends a provider key per environment: a team-scoped key may be restricted to
/// Sandbox or Production, and APNs answers a token of such a key in the other environment
/// 403 BadEnvironmentKeyIdInToken. That answer holds the one environment of the app, never the
/// app: the other environment keeps sending.
@Suite(.serialized) struct EnvironmentKeyTests {
    /// The harness's mock is the production host (it trusts the key for both environments);
    /// `sandbox` is the development host, which trusts the key bound to `sandboxBinding`.
    final class Hosts {
        let harness: DaemonHarness
        private(set) var sandbox: APNsMockServer
        let sandboxPort: UInt16
        private var sandboxConfiguration: MockConfiguration

        init(database: IsolatedDatabase, sandboxBinding: APNsEnvironment?) throws {
            harness = try DaemonHarness(database: database)
            var configuration = MockConfiguration(certificateChainFile: harness.certificates.serverCertificate,
                                                  privateKeyFile: harness.certificates.serverKey)
            configuration.development = true
            configuration.logsAccepted = true
            configuration.countsPerToken = true
            sandboxConfiguration = configuration
            sandbox = try APNsMockServer(configuration: try Self.trusting(configuration, harness: harness, binding: sandboxBinding))
            sandboxPort = try sandbox.start()
            sandboxConfiguration.port = sandboxPort
        }

        deinit { sandbox.stop() }

        private static func trusting(_ configuration: MockConfiguration, harness: DaemonHarness,
                                     binding: APNsEnvironment?) throws -> MockConfiguration {
            var configuration = configuration
            let trusted = try String(contentsOfFile: harness.directory + "/trusted.pub", encoding: .utf8)
            configuration.authentication = .token(keys: [ProviderKey(keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID,
                                                                     publicKeyPEM: trusted, environment: binding)],
                                                  startAtOneStream: true)
            return configuration
        }

        /// A new sandbox host on the same port that trusts the key bound to `binding`.
        func restartSandbox(binding: APNsEnvironment?) throws {
            sandbox.stop()
            sandbox = try APNsMockServer(configuration: try Self.trusting(sandboxConfiguration, harness: harness, binding: binding))
            _ = try sandbox.start()
        }

        /// The harness's token app as a YAML file for the real binary: a production app with a
        /// host per environment.
        func writeConfigFile() throws -> String {
            let path = try harness.writeConfigFile()
            let production = "  host: 127.0.0.1:\(harness.mockPort)\n"
            let yaml = try String(contentsOfFile: path, encoding: .utf8)
                .replacingOccurrences(of: production, with: production + "  sandbox_host: 127.0.0.1:\(sandboxPort)\n")
                .replacingOccurrences(of: "    environment: sandbox\n", with: "    environment: production\n")
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
    }

    static let payload = #"{"aps":{"alert":"hi"}}"#

    static func insert(_ connection: PGConnection, environment: String, tokens: ClosedRange<Int>) throws {
        for seed in tokens {
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, environment) VALUES ('shop', $1, $2, $3)",
                                 [DaemonHarness.token(seed), Self.payload, environment])
        }
    }

    /// The app's key is restricted to production and some of its jobs are for sandbox
    /// (development builds): the sandbox jobs wait, unspent, and say why in the log, the metric,
    /// `/readyz` and `pushd status`; production keeps sending, before and after the answer.
    /// Once APNs takes the key in sandbox, a SIGHUP sends the sandbox jobs once each.
    @Test func aKeyRestrictedToProductionHoldsOnlyTheSandboxJobs() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database, sandboxBinding: .production)
            let connection = try database.connect()
            defer { connection.close() }
            try Self.insert(connection, environment: "sandbox", tokens: 1...3)
            try Self.insert(connection, environment: "production", tokens: 11...13)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try hosts.writeConfigFile(), log: hosts.harness.directory + "/pushd.log")
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="BadEnvironmentKeyIdInToken"} 1"#
            #expect(DaemonHarness.wait(seconds: 30) { daemon.metrics().contains(held) }, "\(daemon.text)")
            #expect(daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="production",reason="BadEnvironmentKeyIdInToken"} 0"#))
            #expect(daemon.metrics().contains(#"pushd_app_paused{app="shop"} 0"#))

            // Production is not held: what was queued and what comes after the answer goes out.
            try Self.insert(connection, environment: "production", tokens: 14...16)
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'production'") == 0
            }, "\(daemon.text)")
            #expect(hosts.harness.mock.stats.accepted == 6)
            // The sandbox jobs are kept, no attempt spent, nothing dead-lettered.
            Thread.sleep(forTimeInterval: 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'sandbox' AND attempts = 0") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(hosts.sandbox.stats.accepted == 0)
            #expect(hosts.sandbox.stats.rejected("BadEnvironmentKeyIdInToken") >= 1)

            // One error line naming the key, the environment and the fix.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of every notification for app shop in sandbox is held",
                             "the key \(DaemonHarness.keyID) is not valid for sandbox",
                             "give the app a key for sandbox as sandbox_token, or a key for both environments",
                             "\"environment\":\"sandbox\"", "\"scope\":\"environment\"", "\"reason\":\"BadEnvironmentKeyIdInToken\"",
                             "\"key_id\":\"\(DaemonHarness.keyID)\""] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            #expect(!daemon.text.contains("is paused"), "\(daemon.text)")
            // /readyz stays ready (production sends) and names the held environment.
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop every notification (sandbox): BadEnvironmentKeyIdInToken")
            }, "\(daemon.readyz())")
            #expect(daemon.readyz().hasPrefix("ready:"))
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of every notification (sandbox) is held on") }
            }, "\(status.text)")

            // APNs takes the key in sandbox now; SIGHUP ends the hold and the jobs go out once each.
            try hosts.restartSandbox(binding: nil)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(hosts.sandbox.stats.accepted == 3)
            #expect((1...3).allSatisfy { hosts.sandbox.stats.perToken[DaemonHarness.token($0)]?.accepted == 1 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="BadEnvironmentKeyIdInToken"} 0"#)
            })
        }
    }
}
