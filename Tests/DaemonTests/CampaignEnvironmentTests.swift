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
/// `sandbox_certificate`). A campaign of registered tokens has targets of both environments
/// (its sandbox ones in chunks of their own), so A leases chunks holding targets it cannot send: it sends the production ones and
/// leaves the sandbox ones, parked, to B, which alone takes them.
@Suite(.serialized) struct CampaignEnvironmentTests {
    /// The configuration file of an instance with the production certificate and, when asked,
    /// the sandbox one; `fleet`'s first certificate mock is the production host, its second the sandbox one.
    static func writeConfig(_ fleet: TwoInstanceFleet, name: String, sandboxCertificate: Bool) throws -> String {
        try fleet.writeCertificateConfig(name: name, environment: .production, host: fleet.certificatePorts[0],
                                         sandboxHost: fleet.certificatePorts[1], sandboxCertificate: sandboxCertificate,
                                         campaignLeaseSeconds: 3)
    }

    @Test func sandboxTargetsOfAChunkLeasedByAnInstanceWithoutTheSandboxCertificateGoToTheLiveInstanceThatHasIt() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 2)
            defer { fleet.stop() }
            let production = fleet.certificateHosts[0], sandbox = fleet.certificateHosts[1]
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
            let logA = fleet.harness.directory + "/a.log"
            let (_, b) = try fleet.startPausedBThenA(
                configB: try Self.writeConfig(fleet, name: "b.yml", sandboxCertificate: true), logB: fleet.harness.directory + "/b.log",
                registeredB: "SELECT count(*) FROM pushd.instances WHERE 'shop/sandbox' = ANY (environments)",
                configA: try Self.writeConfig(fleet, name: "a.yml", sandboxCertificate: false), logA: logA, on: connection)
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
            #expect(sandbox.stats.accepted == 0)
            #expect(production.acceptedLog.map(\.token).sorted() == productionTokens.sorted())

            TwoInstanceFleet.resume(b)
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 300 && campaign.failed == 0 && campaign.failedByReason.isEmpty,
                    "sent \(campaign.sent) failed \(campaign.failed) \(campaign.failedByReason)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries") == 0)
            // Each target reached its own environment's host once.
            #expect(sandbox.acceptedLog.map(\.token).sorted() == sandboxTokens.sorted())
            #expect(production.acceptedLog.map(\.token).sorted() == productionTokens.sorted())
            let lines = ((try? String(contentsOfFile: logA, encoding: .utf8)) ?? "").split(separator: "\n")
            #expect(!lines.contains { $0.contains("no_credentials_for_environment") }, "\(lines.filter { $0.contains("no_credentials") })")
        }
    }
}
