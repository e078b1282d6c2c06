import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two `pushd run` processes on one database serve the certificate app `shop`: A has only the
/// production certificate, B the sandbox one too (a rolling deploy adding
/// `sandbox_certificate`). A campaign of registered tokens mixes both environments in every
/// chunk, so A leases chunks holding targets it cannot send: it sends the production ones and
/// leaves the sandbox ones, parked, to B, which alone takes them.
@Suite(.serialized) struct CampaignEnvironmentTests {
    /// Two apns-mocks taking the harness's client certificate, one per environment's host.
    struct Hosts {
        let harness: DaemonHarness
        let production: APNsMockServer
        let sandbox: APNsMockServer
        let productionPort: UInt16
        let sandboxPort: UInt16

        init(database: IsolatedDatabase) throws {
            harness = try DaemonHarness(database: database)
            let certificates = harness.certificates
            var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate,
                                                  privateKeyFile: certificates.serverKey)
            configuration.authentication = .certificate(clientCAFile: certificates.caCertificate)
            configuration.logsAccepted = true
            production = try APNsMockServer(configuration: configuration)
            productionPort = try production.start()
            sandbox = try APNsMockServer(configuration: configuration)
            sandboxPort = try sandbox.start()
        }

        func stop() {
            production.stop()
            sandbox.stop()
        }

        /// The configuration file of an instance with the production certificate and, when
        /// asked, the sandbox one.
        func writeConfig(name: String, sandboxCertificate: Bool) throws -> String {
            let certificates = harness.certificates
            var yaml = """
            database:
              url: \(harness.database.url)
            metrics:
              listen: 127.0.0.1:0
            log:
              level: info
            apns:
              host: 127.0.0.1:\(productionPort)
              sandbox_host: 127.0.0.1:\(sandboxPort)
              ca_file: \(certificates.caCertificate)
              threads: 1
            retry:
              base_delay_ms: 10
              max_delay_ms: 200
            campaigns:
              lease_s: 3
            shutdown:
              drain_timeout_s: 5
            apps:
              - name: shop
                bundle_id: \(DaemonHarness.bundleID)
                environment: production
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
    }

    static func stop(_ process: Process) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGCONT)
        kill(process.processIdentifier, SIGTERM)
        _ = DaemonProcessTests.waitForExit(process, seconds: 10)
    }

    @Test func sandboxTargetsOfAChunkLeasedByAnInstanceWithoutTheSandboxCertificateGoToTheLiveInstanceThatHasIt() throws {
        try IsolatedDatabase.with { database in
            let hosts = try Hosts(database: database)
            defer { hosts.stop() }
            let connection = try database.connect()
            var sandboxTokens = [String](), productionTokens = [String]()
            for seed in 1000..<1300 {
                let token = DaemonHarness.token(seed)
                let environment = seed % 3 == 0 ? "sandbox" : "production"
                try TokenStore().register(connection, app: "shop", token: token, userID: "u\(seed)", environment: environment)
                if environment == "sandbox" { sandboxTokens.append(token) } else { productionTokens.append(token) }
            }
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "both builds", pushType: "alert",
                                                              payload: #"{"aps":{"alert":"hi"}}"#))
            #expect(try store.importFromDeviceTokens(connection, campaignID: id, chunkSize: 20).imported == 300)

            // B (both certificates) registers, then stops taking any work for a while (SIGSTOP):
            // its row stays live, so A knows the sandbox has an instance, and A leases every chunk.
            let b = try DaemonProcessTests.start(config: try hosts.writeConfig(name: "b.yml", sandboxCertificate: true),
                                                 log: hosts.harness.directory + "/b.log")
            defer { Self.stop(b) }
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances WHERE 'shop/sandbox' = ANY (environments)") == 1
            })
            kill(b.processIdentifier, SIGSTOP)
            let logA = hosts.harness.directory + "/a.log"
            let a = try DaemonProcessTests.start(config: try hosts.writeConfig(name: "a.yml", sandboxCertificate: false), log: logA)
            defer { Self.stop(a) }
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances") == 2
            })
            try store.start(connection, id: id)

            #expect(try DaemonHarness.wait(seconds: 30) {
                try store.campaign(connection, id: id).map { $0.chunksDone == $0.chunksTotal } == true
            })
            // A sent every production target, failed none, and left the sandbox ones parked.
            PosixThread.sleep(seconds: 2)
            var campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.status == .running && campaign.sent == productionTokens.count && campaign.failed == 0,
                    "\(campaign.status) sent \(campaign.sent) failed \(campaign.failed) \(campaign.failedByReason)")
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_retries
                WHERE environment = 'sandbox' AND attempts = 0 AND last_error LIKE 'NoCredentialsForEnvironment: left to an instance%'
                """) == sandboxTokens.count)
            #expect(hosts.sandbox.stats.accepted == 0)
            #expect(hosts.production.acceptedLog.map(\.token).sorted() == productionTokens.sorted())

            kill(b.processIdentifier, SIGCONT)
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 300 && campaign.failed == 0 && campaign.failedByReason.isEmpty,
                    "sent \(campaign.sent) failed \(campaign.failed) \(campaign.failedByReason)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries") == 0)
            // Each target reached its own environment's host once.
            #expect(hosts.sandbox.acceptedLog.map(\.token).sorted() == sandboxTokens.sorted())
            #expect(hosts.production.acceptedLog.map(\.token).sorted() == productionTokens.sorted())
            let lines = ((try? String(contentsOfFile: logA, encoding: .utf8)) ?? "").split(separator: "\n")
            #expect(!lines.contains { $0.contains("no_credentials_for_environment") }, "\(lines.filter { $0.contains("no_credentials") })")
        }
    }
}
