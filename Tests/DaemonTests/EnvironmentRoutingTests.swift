import APNsMock
import Posix
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Each notification goes to its environment's host: the job's `environment`, else its
/// token's registered one, else the app's. Two apns-mocks stand for the production and the
/// sandbox host, so every send shows which host it reached.
@Suite(.serialized) struct EnvironmentRoutingTests {
    /// The harness's mock is the production host; `sandbox` is a second one.
    struct Hosts {
        let harness: DaemonHarness
        let sandbox: APNsMockServer
        let sandboxPort: UInt16

        init(database: IsolatedDatabase, productionFaults: FaultConfiguration = .none, sandboxFaults: FaultConfiguration = .none) throws {
            harness = try DaemonHarness(database: database, faults: productionFaults)
            var configuration = MockConfiguration(certificateChainFile: harness.certificates.serverCertificate,
                                                  privateKeyFile: harness.certificates.serverKey)
            let trusted = try String(contentsOfFile: harness.directory + "/trusted.pub", encoding: .utf8)
            configuration.authentication = .token(keys: [ProviderKey(keyID: DaemonHarness.keyID, teamID: DaemonHarness.teamID,
                                                                     publicKeyPEM: trusted)], startAtOneStream: true)
            configuration.logsAccepted = true
            configuration.faults = sandboxFaults
            sandbox = try APNsMockServer(configuration: configuration)
            sandboxPort = try sandbox.start()
        }

        /// The harness's token app, production by default, with a host per environment.
        func config() -> PushdConfig {
            var config = harness.config()
            config.apps[0].environment = .production
            config.apns.sandboxHostOverride = "127.0.0.1:\(sandboxPort)"
            return config
        }

        /// `config()` as a YAML file, for the real binary.
        func writeConfigFile() throws -> String {
            let path = try harness.writeConfigFile()
            let production = "  host: 127.0.0.1:\(harness.mockPort)\n"
            let yaml = try String(contentsOfFile: path, encoding: .utf8)
                .replacingOccurrences(of: production, with: production + "  sandbox_host: 127.0.0.1:\(sandboxPort)\n")
                .replacingOccurrences(of: "    environment: sandbox\n", with: "    environment: production\n")
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        var production: APNsMockServer { harness.mock }
    }

    static let payload = #"{"aps":{"alert":"hi"}}"#

    @Test func jobsGoToTheirOwnThenTheirTokensThenTheAppsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let pipeline = try hosts.harness.pipeline(hosts.config())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            let development = DaemonHarness.token(1), store = DaemonHarness.token(2)
            let explicit = DaemonHarness.token(3), unknown = DaemonHarness.token(4)
            try TokenStore().register(connection, app: "shop", token: development, userID: "ann", environment: "sandbox")
            try TokenStore().register(connection, app: "shop", token: store, userID: "ann", environment: "production")
            // Fan-out copies each token's environment; a plain insert of a registered token
            // goes where it was registered; a job's own environment wins; an unknown token
            // without one goes to the app's.
            #expect(try connection.query("SELECT pushd.notify_user('shop', 'ann', $1)", [Self.payload]).require(Int.self, row: 0, column: 0) == 2)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                                 [development.uppercased(), Self.payload])
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, environment) VALUES ('shop', $1, $2, 'sandbox')",
                                 [explicit, Self.payload])
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)", [unknown, Self.payload])

            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(hosts.production.acceptedLog.map(\.token).sorted() == [store, unknown].sorted())
            #expect(hosts.sandbox.acceptedLog.map(\.token).sorted() == [development, development, explicit].sorted())
            // Metrics name the environment each notification went to.
            let text = pipeline.context.metrics.registry.expositionText()
            for (environment, count) in [("sandbox", 3), ("production", 2)] {
                let sent = #"pushd_notifications_sent_total{app="shop",environment="\#(environment)",push_type="alert",lane="transactional"} \#(count)"#
                let accepted = #"pushd_apns_responses_total{app="shop",environment="\#(environment)",status="200",reason="none"} \#(count)"#
                #expect(text.contains(sent + "\n") && text.contains(accepted + "\n"),
                        "\(text.split(separator: "\n").filter { $0.contains("sent_total") || $0.contains("responses_total") })")
            }
        }
    }

    @Test func aTokenIsPrunedOnlyOnAnAnswerFromItsOwnEnvironmentsHost() throws {
        let development = DaemonHarness.token(11), store = DaemonHarness.token(12)
        try IsolatedDatabase.with { database in
            // The production host knows neither token.
            let hosts = try Hosts(database: database, productionFaults: FaultConfiguration(badDeviceTokens: [development, store]))
            defer { hosts.sandbox.stop() }
            let pipeline = try hosts.harness.pipeline(hosts.config())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            let tokens = TokenStore()
            try tokens.register(connection, app: "shop", token: development, userID: "ann", environment: "sandbox")
            try tokens.register(connection, app: "shop", token: store, userID: "bob", environment: "production")
            // Both sent to production on purpose: its BadDeviceToken says nothing about a sandbox token.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, environment)
                VALUES ('shop', $1, $3, 'production'), ('shop', $2, $3, 'production')
                """, [development, store, Self.payload])

            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason LIKE 'BadDeviceToken%'") == 2)
            #expect(try tokens.token(connection, app: "shop", token: development)?.invalidatedAt == nil)
            #expect(try tokens.token(connection, app: "shop", token: store)?.invalidatedAt != nil)
        }
    }

    @Test func aCertificateAppWithoutACertificateForTheEnvironmentDeadLettersUnsent() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.sandbox.stop() }
            var config = hosts.config()
            let certificates = hosts.harness.certificates
            config.apps[0].credentials = .certificate(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey,
                                                      pkcs12File: nil, password: nil)
            let pipeline = try hosts.harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            try TokenStore().register(connection, app: "shop", token: DaemonHarness.token(21), userID: "ann", environment: "sandbox")
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                                 [DaemonHarness.token(21), Self.payload])

            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            let dead = try connection.query("SELECT status, reason FROM pushd.dead_jobs")
            try #require(dead.rowCount == 1)
            #expect(try dead.get(Int.self, row: 0, column: 0) == nil)
            let reason = try dead.require(String.self, row: 0, column: 1)
            #expect(reason.hasPrefix("NoCredentialsForEnvironment: app shop has no certificate for sandbox"), "\(reason)")
            #expect(hosts.sandbox.stats.accepted == 0 && hosts.production.stats.accepted == 0)
        }
    }

    @Test func aCampaignFromRegisteredTokensSendsEachToItsOwnEnvironment() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let pipeline = try hosts.harness.pipeline(hosts.config())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            var sandboxTokens = [String](), productionTokens = [String]()
            for seed in 100..<140 {
                let token = DaemonHarness.token(seed)
                let environment = seed % 3 == 0 ? "sandbox" : "production"
                try TokenStore().register(connection, app: "shop", token: token, userID: "u\(seed)", environment: environment)
                if environment == "sandbox" { sandboxTokens.append(token) } else { productionTokens.append(token) }
            }
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "both builds", pushType: "alert", payload: Self.payload))
            #expect(try store.importFromDeviceTokens(connection, campaignID: id, chunkSize: 16).imported == 40)
            #expect(try store.start(connection, id: id) == .running)

            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(hosts.production.acceptedLog.map(\.token).sorted() == productionTokens.sorted())
            #expect(hosts.sandbox.acceptedLog.map(\.token).sorted() == sandboxTokens.sorted())
        }
    }

    /// A running campaign for the sandbox of `tokens`, imported as from a file.
    static func startSandboxCampaign(_ connection: PGConnection, tokens: [String], rate: Int? = nil) throws -> Int64 {
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: "shop", name: "beta testers", pushType: "alert",
                                                          environment: "sandbox", payload: Self.payload, rateLimit: rate))
        #expect(try store.importTargets(connection, campaignID: id, targets: tokens.map { (token: $0, payload: String?.none) }).imported == tokens.count)
        #expect(try store.start(connection, id: id) == .running)
        return id
    }

    @Test func aCampaignImportedFromAFileGoesToTheCampaignsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let pipeline = try hosts.harness.pipeline(hosts.config())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            let store = CampaignStore()
            let tokens = (200..<210).map { DaemonHarness.token($0) }
            let id = try Self.startSandboxCampaign(connection, tokens: tokens)

            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(hosts.sandbox.acceptedLog.map(\.token).sorted() == tokens)
            #expect(hosts.production.stats.accepted == 0)
        }
    }

    /// A capped sandbox campaign paused mid-chunk: the target the worker was about to send
    /// when it saw the pause is parked unsent, and goes to the sandbox host after the resume.
    /// It was parked as production (the default of a target not yet sent) and sent there.
    @Test func aPausedCappedCampaignsUnsentTargetsStillGoToTheCampaignsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let pipeline = try hosts.harness.pipeline(hosts.config())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            let store = CampaignStore()
            let tokens = (300..<700).map { DaemonHarness.token($0) }
            let id = try Self.startSandboxCampaign(connection, tokens: tokens, rate: 100)

            #expect(DaemonHarness.wait(seconds: 20) { hosts.sandbox.stats.accepted >= 50 })
            #expect(try store.pause(connection, id: id) == .paused)
            // The paced chunk sees the pause at its next checkpoint (every 2 s).
            Thread.sleep(forTimeInterval: 3)
            #expect(try store.resume(connection, id: id) == .running)
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(hosts.production.stats.accepted == 0)
            #expect(Set(tokens).subtracting(hosts.sandbox.acceptedLog.map(\.token)) == [])
        }
    }

    /// A broadcast goes to its environment's host as a notification does: `apns.sandbox_host`
    /// for the sandbox. The broadcast worker sent every broadcast to `apns.host` (the production
    /// host here) whatever its environment.
    @Test func aBroadcastGoesToTheHostOfItsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let channel = try #require(hosts.sandbox.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            // Both mocks stand in for the one APNs, which has the channel whichever host is asked.
            hosts.production.adoptChannel(bundleID: DaemonHarness.bundleID, channelID: channel, storagePolicy: .noMessageStored)
            let pipeline = try hosts.harness.pipeline(hosts.config())
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, environment) VALUES ('shop', $1, $2, 'sandbox')",
                                 [channel, BroadcastDaemonTests.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)",
                                 [channel, BroadcastDaemonTests.update])

            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(hosts.sandbox.stats.broadcastsAccepted[channel, default: 0] == 1)
            #expect(hosts.production.stats.broadcastsAccepted[channel, default: 0] == 1)
        }
    }
}
