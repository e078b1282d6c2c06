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
/// 403 BadEnvironmentKeyInToken. That answer holds the one environment of the app, never the
/// app: the other environment keeps sending.
@Suite(.serialized) struct EnvironmentKeyTests {
    /// Two hosts of their own, production and sandbox (the harness's mock stays idle), each
    /// trusting the keys it is given, bound to an environment or not.
    final class Hosts {
        let harness: DaemonHarness
        let production: APNsMockServer
        private(set) var sandbox: APNsMockServer
        private var sandboxConfiguration: MockConfiguration

        /// `keys` gives what each host trusts, from the harness (its directory holds the keys).
        init(database: IsolatedDatabase,
             keys: (DaemonHarness) throws -> (production: [ProviderKey], sandbox: [ProviderKey])) throws {
            harness = try DaemonHarness(database: database)
            let (productionKeys, sandboxKeys) = try keys(harness)
            var configuration = MockConfiguration(certificateChainFile: harness.certificates.serverCertificate,
                                                  privateKeyFile: harness.certificates.serverKey)
            configuration.logsAccepted = true
            configuration.countsPerToken = true
            configuration.authentication = .token(keys: productionKeys, startAtOneStream: true)
            production = try APNsMockServer(configuration: configuration)
            _ = try production.start()
            configuration.development = true
            configuration.authentication = .token(keys: sandboxKeys, startAtOneStream: true)
            sandbox = try APNsMockServer(configuration: configuration)
            configuration.port = try sandbox.start()
            sandboxConfiguration = configuration
        }

        deinit {
            production.stop()
            sandbox.stop()
        }

        /// The harness's key (`DaemonHarness.keyID`), bound to `environment` or not.
        static func harnessKey(_ harness: DaemonHarness, _ environment: APNsEnvironment?) throws -> ProviderKey {
            ProviderKey(keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID,
                        publicKeyPEM: try String(contentsOfFile: harness.directory + "/trusted.pub", encoding: .utf8), environment: environment)
        }

        /// A new sandbox host on the same port that trusts `keys`.
        func restartSandbox(keys: [ProviderKey]) throws {
            sandbox.stop()
            var configuration = sandboxConfiguration
            configuration.authentication = .token(keys: keys, startAtOneStream: true)
            sandbox = try APNsMockServer(configuration: configuration)
            _ = try sandbox.start()
        }

        /// The harness's token app as a YAML file for the real binary: a production app with a
        /// host per environment, and `extra` lines in the app's block.
        func writeConfigFile(extra: String = "") throws -> String {
            let path = try harness.writeConfigFile()
            let yaml = try String(contentsOfFile: path, encoding: .utf8)
                .replacingOccurrences(of: "  host: 127.0.0.1:\(harness.mockPort)\n",
                                      with: "  host: 127.0.0.1:\(production.port)\n  sandbox_host: 127.0.0.1:\(sandbox.port)\n")
                .replacingOccurrences(of: "    environment: sandbox\n", with: "    environment: production\n")
            try (yaml + extra).write(toFile: path, atomically: true, encoding: .utf8)
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
            // The key is restricted to production: the sandbox host refuses it.
            let hosts = try Hosts(database: database) { harness in
                let key = try Hosts.harnessKey(harness, .production)
                return ([key], [key])
            }
            let connection = try database.connect()
            defer { connection.close() }
            try Self.insert(connection, environment: "sandbox", tokens: 1...3)
            try Self.insert(connection, environment: "production", tokens: 11...13)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try hosts.writeConfigFile(), log: hosts.harness.directory + "/pushd.log")
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="BadEnvironmentKeyInToken"} 1"#
            #expect(DaemonHarness.wait(seconds: 30) { daemon.metrics().contains(held) }, "\(daemon.text)")
            #expect(daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="production",reason="BadEnvironmentKeyInToken"} 0"#))
            #expect(daemon.metrics().contains(#"pushd_app_paused{app="shop"} 0"#))

            // Production is not held: what was queued and what comes after the answer goes out.
            try Self.insert(connection, environment: "production", tokens: 14...16)
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'production'") == 0
            }, "\(daemon.text)")
            #expect(hosts.production.stats.accepted == 6)
            // The sandbox jobs are kept, no attempt spent, nothing dead-lettered.
            Thread.sleep(forTimeInterval: 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'sandbox' AND attempts = 0") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(hosts.sandbox.stats.accepted == 0)
            #expect(hosts.sandbox.stats.rejected("BadEnvironmentKeyInToken") >= 1)

            // One error line naming the key, the environment and the fix.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of every notification for app shop in sandbox is held",
                             "the key \(DaemonHarness.keyID) is not valid for sandbox",
                             "give the app a key for sandbox as sandbox_token, or a key for both environments",
                             "\"environment\":\"sandbox\"", "\"scope\":\"environment\"", "\"reason\":\"BadEnvironmentKeyInToken\"",
                             "\"key_id\":\"\(DaemonHarness.keyID)\""] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            #expect(!daemon.text.contains("is paused"), "\(daemon.text)")
            // /readyz stays ready (production sends) and names the held environment.
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop every notification (sandbox): BadEnvironmentKeyInToken")
            }, "\(daemon.readyz())")
            #expect(daemon.readyz().hasPrefix("ready:"))
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of every notification (sandbox) is held on") }
            }, "\(status.text)")

            // APNs takes the key in sandbox now; SIGHUP ends the hold and the jobs go out once each.
            try hosts.restartSandbox(keys: [try Hosts.harnessKey(hosts.harness, nil)])
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(hosts.sandbox.stats.accepted == 3)
            #expect((1...3).allSatisfy { hosts.sandbox.stats.perToken[DaemonHarness.token($0)]?.accepted == 1 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="BadEnvironmentKeyInToken"} 0"#)
            })
        }
    }

    /// `sandbox_token` names a key APNs does not take (one it does not know: InvalidProviderToken)
    /// while production's key is good. The answer judges the sandbox key only: sandbox is held,
    /// loudly (the line with the key and the fix, the gauge, `/readyz`, `pushd status`), and
    /// production keeps sending, also what is queued after the answer. A SIGHUP once APNs takes
    /// the key sends the sandbox jobs, once each.
    @Test func anInvalidSandboxKeyHoldsOnlyTheSandboxJobs() throws {
        try IsolatedDatabase.with { database in
            let sandboxKeyID = "DEVKEY1234"
            var sandboxKeyFile = ""
            var sandboxKey: ProviderKey?
            let hosts = try Hosts(database: database) { harness in
                sandboxKeyFile = harness.directory + "/sandbox.p8"
                try DaemonHarness.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", sandboxKeyFile])
                try DaemonHarness.openssl(["pkey", "-in", sandboxKeyFile, "-pubout", "-out", harness.directory + "/sandbox.pub"])
                sandboxKey = ProviderKey(keyID: sandboxKeyID, teamID: DaemonHarness.teamID,
                                         publicKeyPEM: try String(contentsOfFile: harness.directory + "/sandbox.pub", encoding: .utf8),
                                         environment: .sandbox)
                // Neither host knows the sandbox key.
                let production = try Hosts.harnessKey(harness, .production)
                return ([production], [production])
            }
            chmod(sandboxKeyFile, 0o600)
            let connection = try database.connect()
            defer { connection.close() }
            try Self.insert(connection, environment: "sandbox", tokens: 1...3)
            try Self.insert(connection, environment: "production", tokens: 11...13)
            let config = try hosts.writeConfigFile(extra: """

                    sandbox_token:
                      team_id: \(DaemonHarness.teamID)
                      key_id: \(sandboxKeyID)
                      key_file: \(sandboxKeyFile)

                """)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: hosts.harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 30) { hosts.sandbox.stats.rejected("InvalidProviderToken") >= 1 }, "\(daemon.text)")

            // Production is not held: what was queued and what comes after the answer goes out.
            try Self.insert(connection, environment: "production", tokens: 14...16)
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'production'") == 0
            }, "\(daemon.text)")
            #expect(hosts.production.stats.accepted == 6)
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="InvalidProviderToken"} 1"#
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains(held) }, "\(daemon.metrics())")
            #expect(daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="production",reason="InvalidProviderToken"} 0"#))
            #expect(daemon.metrics().contains(#"pushd_app_paused{app="shop"} 0"#))
            // The sandbox jobs are kept, no attempt spent, nothing dead-lettered.
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'sandbox' AND attempts = 0") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(hosts.sandbox.stats.accepted == 0)

            // One error line naming the app, the environment, the key and the fix (written after the gauge).
            #expect(DaemonHarness.wait(seconds: 5) { daemon.text.contains("\"event\":\"sending_held\"") })
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of every notification for app shop in sandbox is held",
                             "the key \(sandboxKeyID) of team \(DaemonHarness.teamID), which the app uses for sandbox only (InvalidProviderToken)",
                             "check sandbox_token", "\"environment\":\"sandbox\"", "\"scope\":\"environment\"",
                             "\"reason\":\"InvalidProviderToken\"", "\"key_id\":\"\(sandboxKeyID)\""] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            #expect(!daemon.text.contains("is paused"), "\(daemon.text)")
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop every notification (sandbox): InvalidProviderToken")
            }, "\(daemon.readyz())")
            #expect(daemon.readyz().hasPrefix("ready:"))
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of every notification (sandbox) is held on") }
            }, "\(status.text)")

            // APNs knows the sandbox key now; SIGHUP ends the hold and the jobs go out once each.
            try hosts.restartSandbox(keys: [try Hosts.harnessKey(hosts.harness, .production), try #require(sandboxKey)])
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(hosts.sandbox.stats.accepted == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="InvalidProviderToken"} 0"#)
            })
        }
    }

    /// Apple's recommendation followed: `token` is a production-only key and `sandbox_token` a
    /// sandbox-only one. Each environment's notifications are signed with its own key, so both
    /// deliver and nothing is held.
    @Test func aKeyPerEnvironmentDeliversToBoth() throws {
        try IsolatedDatabase.with { database in
            let sandboxKeyID = "DEVKEY1234"
            var sandboxKeyFile = ""
            let hosts = try Hosts(database: database) { harness in
                sandboxKeyFile = harness.directory + "/sandbox.p8"
                try DaemonHarness.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", sandboxKeyFile])
                try DaemonHarness.openssl(["pkey", "-in", sandboxKeyFile, "-pubout", "-out", harness.directory + "/sandbox.pub"])
                let sandboxKey = ProviderKey(keyID: sandboxKeyID, teamID: DaemonHarness.teamID,
                                             publicKeyPEM: try String(contentsOfFile: harness.directory + "/sandbox.pub", encoding: .utf8),
                                             environment: .sandbox)
                let keys = [try Hosts.harnessKey(harness, .production), sandboxKey]
                return (keys, keys)
            }
            chmod(sandboxKeyFile, 0o600)
            let connection = try database.connect()
            defer { connection.close() }
            try Self.insert(connection, environment: "sandbox", tokens: 1...3)
            try Self.insert(connection, environment: "production", tokens: 11...13)
            let config = try hosts.writeConfigFile(extra: """

                    sandbox_token:
                      team_id: \(DaemonHarness.teamID)
                      key_id: \(sandboxKeyID)
                      key_file: \(sandboxKeyFile)

                """)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: hosts.harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(hosts.production.stats.accepted == 3)
            #expect(hosts.sandbox.stats.accepted == 3)
            #expect(hosts.production.stats.rejected("BadEnvironmentKeyInToken") == 0)
            #expect(hosts.sandbox.stats.rejected("BadEnvironmentKeyInToken") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(!daemon.text.contains("\"event\":\"sending_held\""), "\(daemon.text)")
        }
    }
}
