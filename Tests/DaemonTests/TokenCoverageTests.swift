import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two `pushd run` processes on one database serve app `shop`: A has only a certificate, B a
/// token key (a move from certificates to keys, one instance at a time). APNs takes Live
/// Activity and location pushes only with token authentication, so A leaves that work,
/// unsent and unspent, to B; only when no live instance has a key for the app is it
/// dead-lettered, saying so. A broadcast and a channel request, which APNs takes with a
/// certificate too, A sends itself.
@Suite(.serialized) struct TokenCoverageTests {
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#

    /// The harness's mock takes B's provider tokens; `fleet`'s certificate mock takes A's client
    /// certificate, on its push and its channel management listeners.
    static func fleet(_ database: IsolatedDatabase) throws -> TwoInstanceFleet {
        try TwoInstanceFleet(database: database, certificateHosts: 1)
    }

    /// A's configuration file: app `shop` with a certificate only.
    static func writeCertificateConfig(_ fleet: TwoInstanceFleet) throws -> String {
        try fleet.writeCertificateConfig(name: "a.yml", environment: .sandbox, host: fleet.certificatePorts[0])
    }

    /// A Live Activity update, a location query, an alert, a broadcast to `channel` and a
    /// channel creation of app `shop`; returns the tokens of the two token-only pushes.
    static func insertWork(_ connection: PGConnection, channel: String) throws -> [String] {
        try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, push_type, priority, payload) VALUES
              ('shop', $1, 'alert', 10, '{"aps":{"alert":"hi"}}'),
              ('shop', $2, 'liveactivity', 10, $4),
              ('shop', $3, 'location', 10, '{"aps":{}}')
            """, [DaemonHarness.token(1), DaemonHarness.token(2), DaemonHarness.token(3), update])
        try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)", [channel, update])
        try connection.query("SELECT pushd.create_channel('shop', 'most-recent')")
        return [DaemonHarness.token(2), DaemonHarness.token(3)]
    }

    /// Every dead job's push type and reason, for a failing expectation's message.
    static func deadJobs(_ connection: PGConnection) -> String {
        (try? connection.query("SELECT coalesce(string_agg(push_type || ': ' || reason, '; '), '') FROM pushd.dead_jobs")
            .require(String.self, row: 0, column: 0)) ?? "?"
    }

    @Test func tokenOnlyWorkOfAnInstanceWithACertificateIsSentByTheLiveInstanceWithATokenKey() throws {
        try IsolatedDatabase.with { database in
            let fleet = try Self.fleet(database)
            defer { fleet.stop() }
            let harness = fleet.harness, certificateMock = fleet.certificateHosts[0]
            let connection = try database.connect()
            defer { connection.close() }
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            // Both mocks stand in for the one APNs, which has the channel whoever sends to it.
            certificateMock.adoptChannel(bundleID: DaemonHarness.bundleID, channelID: channel, storagePolicy: .noMessageStored)
            let channelsBefore = harness.mock.stats.channelsCreated

            // B (token key) registers, then takes no work for a while (SIGSTOP): its row stays
            // live, so A knows the fleet has a key for `shop`, and A alone claims.
            let logB = harness.directory + "/b.log"
            let logA = harness.directory + "/a.log"
            let (_, b) = try fleet.startPausedBThenA(configB: try harness.writeConfigFile(), logB: logB,
                                                     configA: try Self.writeCertificateConfig(fleet), logA: logA, on: connection)
            let tokenOnly = try Self.insertWork(connection, channel: channel)

            // A sends the alert, the broadcast and the channel creation (with its certificate)
            // and leaves the rest, unsent, unspent, not dead-lettered.
            #expect(DaemonHarness.wait(seconds: 20) { certificateMock.stats.accepted == 1 }, "\(TwoInstanceFleet.text(logA))")
            #expect(DaemonHarness.wait(seconds: 20) { certificateMock.stats.broadcastsAccepted[channel] == 1 }, "\(TwoInstanceFleet.text(logA))")
            #expect(DaemonHarness.wait(seconds: 20) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active'")) == 1
            }, "\(TwoInstanceFleet.text(logA))")
            PosixThread.sleep(seconds: 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0,
                    "\(Self.deadJobs(connection))")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE attempts = 0") == 2)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0)
            #expect(certificateMock.stats.channelsCreated == 1)
            #expect(harness.mock.stats.accepted == 0)
            // A's info line lists its gaps that another instance fills: the production environment and the token work.
            let left = TwoInstanceFleet.text(logA).split(separator: "\n").filter { $0.contains("environment_coverage") }
                .compactMap { $0.split(separator: "left to other instances: ").dropFirst().first?.split(separator: ";").first }
            #expect(left.contains { $0.contains("shop/token") }, "\(TwoInstanceFleet.text(logA))")

            TwoInstanceFleet.resume(b)
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active'") == 1
            }, "\(TwoInstanceFleet.text(logB))")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(harness.mock.acceptedLog.map(\.token).sorted() == tokenOnly.sorted())
            #expect(harness.mock.stats.broadcastsAccepted.isEmpty && certificateMock.stats.broadcastsAccepted[channel] == 1)
            #expect(harness.mock.stats.channelsCreated == channelsBefore)
            #expect(certificateMock.acceptedLog.map(\.token) == [DaemonHarness.token(1)])
            #expect(!TwoInstanceFleet.text(logA).contains("no_token_key_in_fleet"))
        }
    }

    /// A Live Activity campaign: A leases its chunks (leases select by app) and parks every
    /// target, unsent and unspent, for B, whose parked claim alone takes them.
    @Test func aLiveActivityCampaignLeasedByTheCertificateInstanceIsSentByTheInstanceWithATokenKey() throws {
        try IsolatedDatabase.with { database in
            let fleet = try Self.fleet(database)
            defer { fleet.stop() }
            let harness = fleet.harness, certificateMock = fleet.certificateHosts[0]
            let connection = try database.connect()
            defer { connection.close() }
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "scores", pushType: "liveactivity", payload: Self.update))
            let tokens = (500..<560).map { DaemonHarness.token($0) }
            #expect(try store.importTargets(connection, campaignID: id, targets: tokens.map { (token: $0, payload: String?.none) },
                                            chunkSize: 20).imported == 60)

            let logA = harness.directory + "/a.log"
            let (_, b) = try fleet.startPausedBThenA(configB: try harness.writeConfigFile(), logB: harness.directory + "/b.log",
                                                     configA: try Self.writeCertificateConfig(fleet), logA: logA, on: connection)
            try store.start(connection, id: id)

            #expect(try DaemonHarness.wait(seconds: 30) {
                try store.campaign(connection, id: id).map { $0.chunksDone == $0.chunksTotal } == true
            }, "\(TwoInstanceFleet.text(logA))")
            PosixThread.sleep(seconds: 2)
            var campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.status == .running && campaign.sent == 0 && campaign.failed == 0,
                    "\(campaign.status) sent \(campaign.sent) failed \(campaign.failed) \(campaign.failedByReason)")
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_retries
                WHERE attempts = 0 AND last_error = 'TokenAuthenticationRequired: left to an instance that has a token key for app shop'
                """) == 60)
            #expect(harness.mock.stats.accepted == 0 && certificateMock.stats.accepted == 0)

            TwoInstanceFleet.resume(b)
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 60 && campaign.failed == 0, "sent \(campaign.sent) failed \(campaign.failed) \(campaign.failedByReason)")
            #expect(harness.mock.acceptedLog.map(\.token).sorted() == tokens.sorted())
            #expect(!TwoInstanceFleet.text(logA).contains("no_token_key_in_fleet"))
        }
    }

    @Test func withNoLiveInstanceHoldingATokenKeyTheTokenOnlyWorkIsDeadLetteredSayingSo() throws {
        try IsolatedDatabase.with { database in
            let fleet = try Self.fleet(database)
            defer { fleet.stop() }
            let harness = fleet.harness, certificateMock = fleet.certificateHosts[0]
            let connection = try database.connect()
            defer { connection.close() }
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            certificateMock.adoptChannel(bundleID: DaemonHarness.bundleID, channelID: channel, storagePolicy: .noMessageStored)
            let logA = harness.directory + "/a.log"
            _ = try fleet.start(config: try Self.writeCertificateConfig(fleet), log: logA)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances") == 1 })
            _ = try Self.insertWork(connection, channel: channel)
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "scores", pushType: "liveactivity", payload: Self.update))
            try store.importTargets(connection, campaignID: id, targets: (600..<610).map { (token: DaemonHarness.token($0), payload: String?.none) })
            try store.start(connection, id: id)

            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 0 && campaign.failedByReason == ["TokenAuthenticationRequired": 10], "\(campaign.failedByReason)")
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active'") == 1
            }, "\(TwoInstanceFleet.text(logA))")
            let fleetWide = "%no live instance of the fleet has a token key for app shop%"
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.dead_jobs
                WHERE push_type IN ('liveactivity', 'location') AND reason LIKE 'TokenAuthenticationRequired: %' AND reason LIKE '\(fleetWide)'
                """) == 2, "\(Self.deadJobs(connection))")
            // The broadcast and the channel creation need no token key: A sent them with its certificate.
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE channel_id IS NOT NULL") == 0)
            #expect(certificateMock.stats.broadcastsAccepted[channel] == 1)
            #expect(certificateMock.stats.channelsCreated == 1)
            #expect(harness.mock.stats.accepted == 0 && harness.mock.stats.broadcastsAccepted.isEmpty)
            #expect(certificateMock.acceptedLog.map(\.token) == [DaemonHarness.token(1)])
            let lines = TwoInstanceFleet.text(logA).split(separator: "\n").filter { $0.contains("no_token_key_in_fleet") }
            #expect(!lines.isEmpty && lines.allSatisfy { $0.contains("no live instance of the fleet has a token key for app shop") },
                    "\(TwoInstanceFleet.text(logA))")
        }
    }
}
