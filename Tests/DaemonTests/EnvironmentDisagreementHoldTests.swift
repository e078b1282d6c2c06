import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two `pushd run` processes serve app `shop` with different configured environments (A
/// production, B sandbox; both have both certificates). A notification that names no
/// environment, to a token registered without one, would go to the host of whichever instance
/// claimed it, and the other host would answer BadDeviceToken, which fails it and prunes its
/// token. While the instances disagree such work is held; the rest is sent.
@Suite(.serialized) struct EnvironmentDisagreementHoldTests {
    static let payload = #"{"aps":{"alert":"hi"}}"#

    /// A's configuration (production, with a sandbox certificate too) and B's (sandbox, with a
    /// production certificate too); `fleet`'s first certificate mock is the production host,
    /// its second the sandbox one.
    static func writeConfigs(_ fleet: TwoInstanceFleet) throws -> (a: String, b: String) {
        let a = try fleet.writeCertificateConfig(name: "a.yml", environment: .production, host: fleet.certificatePorts[0],
                                                 sandboxHost: fleet.certificatePorts[1], sandboxCertificate: true,
                                                 campaignLeaseSeconds: 3)
        let b = fleet.harness.directory + "/b.yml"
        try String(contentsOfFile: a, encoding: .utf8)
            .replacingOccurrences(of: "environment: production", with: "environment: sandbox")
            .replacingOccurrences(of: "sandbox_certificate:", with: "production_certificate:")
            .write(toFile: b, atomically: true, encoding: .utf8)
        return (a, b)
    }

    /// Starts A and B, and waits until both registered, each has read the other and holds
    /// (`sending_held`, logged once the hold is on; the disagreement's own line comes before it).
    static func startDisagreeing(_ fleet: TwoInstanceFleet) throws -> (a: TLSFailurePausesAppTests.Daemon, b: ChildProcess) {
        let configs = try writeConfigs(fleet)
        let logA = fleet.harness.directory + "/a.log", logB = fleet.harness.directory + "/b.log"
        let a = try TLSFailurePausesAppTests.Daemon(config: configs.a, log: logA)
        let b = try fleet.start(config: configs.b, log: logB)
        #expect(DaemonHarness.wait(seconds: 30) {
            TwoInstanceFleet.text(logA).contains("\"event\":\"sending_held\"")
                && TwoInstanceFleet.text(logB).contains("\"event\":\"sending_held\"")
        }, "a: \(TwoInstanceFleet.text(logA))\nb: \(TwoInstanceFleet.text(logB))")
        return (a, b)
    }

    @Test func notificationsRoutedOnlyByTheConfiguredEnvironmentWaitWhileInstancesDisagreeAndGoOnceToTheRemainingOne() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 2)
            defer { fleet.stop() }
            let production = fleet.certificateHosts[0], sandbox = fleet.certificateHosts[1]
            let connection = try database.connect()
            defer { connection.close() }
            let (a, b) = try Self.startDisagreeing(fleet)

            // Jobs naming no environment, to tokens that are not registered.
            var routedByDefault = [String]()
            for seed in 1...20 {
                let raw = DaemonHarness.token(300 + seed)
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)", [raw, Self.payload])
                routedByDefault.append(raw)
            }
            routedByDefault.sort()
            // Jobs naming their environment, and jobs to tokens registered with one.
            var toProduction = [String](), toSandbox = [String]()
            for seed in 1...5 {
                let ownProduction = DaemonHarness.token(500 + seed), ownSandbox = DaemonHarness.token(600 + seed)
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, environment) VALUES ('shop', $1, $2, 'production')",
                                     [ownProduction, Self.payload])
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, environment) VALUES ('shop', $1, $2, 'sandbox')",
                                     [ownSandbox, Self.payload])
                let registeredSandbox = DaemonHarness.token(700 + seed)
                try TokenStore().register(connection, app: "shop", token: registeredSandbox, userID: "s\(seed)", environment: "sandbox")
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                                     [registeredSandbox, Self.payload])
                toProduction.append(ownProduction)
                toSandbox += [ownSandbox, registeredSandbox]
            }
            // A campaign of 30 targets imported from a file: none names an environment.
            let campaignTokens = (1...30).map { DaemonHarness.token(800 + $0) }
            let store = CampaignStore()
            let campaign = try store.create(connection, NewCampaign(app: "shop", name: "no environment", pushType: "alert", payload: Self.payload))
            #expect(try store.importTargets(connection, campaignID: campaign, targets: campaignTokens.map { ($0, String?.none) }).imported == 30)
            _ = try store.start(connection, id: campaign)

            // What names or has its environment goes there.
            #expect(DaemonHarness.wait(seconds: 20) {
                Set(production.acceptedLog.map(\.token)).isSuperset(of: toProduction)
                    && Set(sandbox.acceptedLog.map(\.token)).isSuperset(of: toSandbox)
            }, "production \(production.acceptedLog.count), sandbox \(sandbox.acceptedLog.count)")
            PosixThread.sleep(seconds: 3)
            // What only the configured environment routes reached neither host, and waits unspent.
            let held = Set(routedByDefault + campaignTokens)
            #expect(production.acceptedLog.filter { held.contains($0.token) }.count == 0)
            #expect(sandbox.acceptedLog.filter { held.contains($0.token) }.count == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == routedByDefault.count)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE attempts = 0 AND starts_with(last_error, 'sending held: ')")
                    == routedByDefault.count)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == 0)
            let waiting = try #require(try store.campaign(connection, id: campaign))
            #expect(waiting.sent == 0 && waiting.failed == 0, "sent \(waiting.sent), failed \(waiting.failed)")

            // Loud: one warning line per instance, the held gauge, /readyz and pushd status.
            let lines = a.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1 && lines[0].contains("\"level\":\"warning\"") && lines[0].contains("\"app\":\"shop\""), "\(a.text)")
            #expect(DaemonHarness.wait(seconds: 10) {
                a.metrics().contains(#"pushd_sending_held{app="shop",environment="production",reason="AppEnvironmentDisagreement"} 1"#)
            })
            #expect(DaemonHarness.wait(seconds: 10) {
                a.readyz().contains("held: app shop notifications routed only by its configured environment (production): AppEnvironmentDisagreement")
            }, "\(a.readyz())")
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of notifications routed only by its configured environment (sandbox) is held on") }
                    && status.problems.contains { $0.contains("app shop: sending of notifications routed only by its configured environment (production) is held on") }
            }, "\(status.text)")

            // B, the odd one out, stops: A's next heartbeats end the hold, and A sends the held
            // work to production, each notification once.
            TwoInstanceFleet.stop(b)
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
                    && store.campaign(connection, id: campaign)?.status == .done
            }, "\(a.text)")
            #expect(production.acceptedLog.filter { held.contains($0.token) }.map(\.token).sorted() == held.sorted())
            #expect(sandbox.acceptedLog.filter { held.contains($0.token) }.count == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let done = try #require(try store.campaign(connection, id: campaign))
            #expect(done.sent == 30 && done.failed == 0)
            #expect(a.text.contains("\"event\":\"sending_resumed\""), "\(a.text)")
            #expect(DaemonHarness.wait(seconds: 10) {
                a.metrics().contains(#"pushd_sending_held{app="shop",environment="production",reason="AppEnvironmentDisagreement"} 0"#)
            })
        }
    }

    /// A broadcast to a channel pushd has no record of, and a channel create request, name no
    /// environment either: only the configured one routes them. While the instances disagree
    /// they wait, unsent and unspent, as jobs do (before, each went to the claimer's host, and
    /// the channel was recorded in the claimer's environment); what names one goes.
    @Test func broadcastsAndChannelRequestsRoutedOnlyByTheConfiguredEnvironmentWaitWhileInstancesDisagree() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 2)
            defer { fleet.stop() }
            let production = fleet.certificateHosts[0], sandbox = fleet.certificateHosts[1]
            let connection = try database.connect()
            defer { connection.close() }
            // Both mocks stand in for the one APNs, which has the channel whoever sends to it.
            let channel = try #require(production.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            sandbox.adoptChannel(bundleID: DaemonHarness.bundleID, channelID: channel, storagePolicy: .noMessageStored)
            let (a, b) = try Self.startDisagreeing(fleet)

            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, BroadcastDaemonTests.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, environment) VALUES ('shop', $1, $2, 'sandbox')",
                                 [channel, BroadcastDaemonTests.update])
            try connection.query("SELECT pushd.create_channel('shop')")
            func rows() -> String {
                let broadcasts = (try? connection.query("SELECT environment, attempts, last_error FROM pushd.broadcast_jobs").rows) ?? []
                let requests = (try? connection.query("SELECT state, environment, outcome FROM pushd.channels").rows) ?? []
                return "broadcasts \(broadcasts), channel requests \(requests)"
            }
            // The broadcast naming its environment goes there.
            #expect(DaemonHarness.wait(seconds: 20) { sandbox.stats.broadcastsAccepted[channel] == 1 }, "\(rows())")
            PosixThread.sleep(seconds: 3)
            #expect(production.stats.broadcastsAccepted[channel, default: 0] == 0, "\(rows())")
            #expect(sandbox.stats.broadcastsAccepted[channel, default: 0] == 1, "\(rows())")
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.broadcast_jobs WHERE environment IS NULL AND attempts = 0 AND starts_with(last_error, 'sending held: ')
                """) == 1, "\(rows())")
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.channels WHERE state = 'pending_create' AND environment IS NULL AND starts_with(outcome, 'sending held: ')
                """) == 1, "\(rows())")

            // B stops: A's heartbeats end the hold and make both due at once (not when their 30 s
            // wait ends, some 25 s after the stop), and A sends both to production, once.
            TwoInstanceFleet.stop(b)
            #expect(try DaemonHarness.wait(seconds: 18) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active' AND environment = 'production'") == 1
            }, "\(rows())\n\(a.text)")
            #expect(production.stats.broadcastsAccepted[channel, default: 0] == 1)
            #expect(sandbox.stats.broadcastsAccepted[channel, default: 0] == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        }
    }
}
