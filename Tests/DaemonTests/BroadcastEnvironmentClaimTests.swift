import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two `pushd run` processes on one database serve the certificate app `shop`: A has only the
/// production certificate, B the sandbox one too. A broadcast to sandbox is B's alone: A's
/// claim leaves it, as its job and campaign claims leave sandbox work. It used to claim it,
/// find it had no sandbox certificate and put it back for `EnvironmentCoverage.leaveRetrySeconds`,
/// every time it won the claim: each sandbox broadcast waited 5 s more, and its row was
/// rewritten for nothing.
@Suite(.serialized) struct BroadcastEnvironmentClaimTests {
    @Test func aSandboxBroadcastIsNotClaimedByTheInstanceWithoutTheSandboxCertificate() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 2)
            defer { fleet.stop() }
            let production = fleet.certificateHosts[0], sandbox = fleet.certificateHosts[1]
            let channel = try #require(production.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            // Both mocks stand in for the one APNs, which has the channel whoever sends to it.
            sandbox.adoptChannel(bundleID: DaemonHarness.bundleID, channelID: channel, storagePolicy: .noMessageStored)
            let connection = try database.connect()
            defer { connection.close() }

            // B (both certificates) registers, then takes no work for a while (SIGSTOP): its row
            // stays live, so A knows the sandbox has an instance, and A alone claims.
            let logA = fleet.harness.directory + "/a.log"
            let (_, b) = try fleet.startPausedBThenA(
                configB: try CampaignEnvironmentTests.writeConfig(fleet, name: "b.yml", sandboxCertificate: true),
                logB: fleet.harness.directory + "/b.log",
                registeredB: "SELECT count(*) FROM pushd.instances WHERE 'shop/sandbox' = ANY (environments)",
                configA: try CampaignEnvironmentTests.writeConfig(fleet, name: "a.yml", sandboxCertificate: false), logA: logA,
                on: connection)
            #expect(DaemonHarness.wait(seconds: 30) {
                TwoInstanceFleet.text(logA).split(separator: "\n")
                    .contains { $0.contains("environment_coverage") && $0.contains("left to other instances: shop/sandbox") }
            }, "\(TwoInstanceFleet.text(logA))")

            // The sandbox broadcast first, so a claim taking it at all takes it before the other.
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, environment) VALUES ('shop', $1, $2, 'sandbox')",
                                 [channel, BroadcastDaemonTests.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)",
                                 [channel, BroadcastDaemonTests.update])
            // A sends the production one, and has not touched the sandbox one: not leased, not
            // put back, still due.
            #expect(DaemonHarness.wait(seconds: 20) { production.stats.broadcastsAccepted[channel] == 1 }, "\(TwoInstanceFleet.text(logA))")
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.broadcast_jobs
                WHERE environment = 'sandbox' AND attempts = 0 AND last_error IS NULL AND leased_until IS NULL AND run_at <= now()
                """) == 1, "\(Self.rows(connection))")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 1, "\(Self.rows(connection))")

            // B, the one with the sandbox certificate, sends it as soon as it works again: never
            // put back meanwhile (a put-back sets an error and, unleased, a run_at 5 s away), whatever the
            // machine's load makes of the time it takes.
            let resumed = Timestamp()
            TwoInstanceFleet.resume(b)
            var putBack: [String] = []
            #expect(try DaemonHarness.wait(seconds: 20) {
                let seen = try DaemonHarness.count(connection, """
                    SELECT count(*) FROM pushd.broadcast_jobs WHERE last_error IS NOT NULL OR (leased_until IS NULL AND run_at > now() + interval '1 second')
                    """)
                if seen > 0 { putBack.append(Self.rows(connection)) }
                return try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
            }, "\(Self.rows(connection))")
            let took = Timestamp().timeIntervalSince(resumed)
            print("the sandbox broadcast was sent \(String(format: "%.2f", took)) s after B resumed")
            #expect(putBack.isEmpty, "the sandbox broadcast was put back before B sent it: \(putBack)")
            #expect(took < 15, "sent \(took) s after B resumed")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(production.stats.broadcastsAccepted[channel, default: 0] + sandbox.stats.broadcastsAccepted[channel, default: 0] == 2)
        }
    }

    /// Every broadcast row, for a failing expectation's message.
    static func rows(_ connection: PGConnection) -> String {
        (try? connection.query("""
            SELECT coalesce(string_agg(coalesce(environment, '-') || ' attempts ' || attempts || ' due ' || (run_at <= now())
                                       || ' leased ' || (leased_until IS NOT NULL) || ' ' || coalesce(last_error, ''), '; '), '')
            FROM pushd.broadcast_jobs
            """).require(String.self, row: 0, column: 0)) ?? "?"
    }
}
