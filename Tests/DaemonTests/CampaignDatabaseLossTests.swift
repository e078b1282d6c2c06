import APNsMock
import Posix
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The campaign workers' database sessions end under them (a PostgreSQL restart, a failover,
/// an operator's pg_terminate_backend) while chunks are being sent: the workers reconnect and
/// go on with their chunks. They used to forget them: the leases sat unused until they ran
/// out, and the worker that took each over sent every target since the last checkpoint again.
@Suite(.serialized) struct CampaignDatabaseLossTests {
    @Test func chunksBeingSentWhenTheWorkersSessionsEndAreFinishedByThemWithNoTargetSentTwice() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let store = CampaignStore()
            // Paced at 1,000/s by the app's campaign_rate: 4,000 targets take about 4 s, so
            // chunks are half sent when the sessions end.
            let config = try CampaignLaneTests.configCapped(harness, rate: 1000)
            // Leases of 10 s: the lease keeper's session ends too, and reconnecting on a loaded
            // machine must not let a lease run out (a forgotten chunk is still taken over then).
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let count = 4000
            let id = try CampaignLaneTests.campaign(connection, count: count)

            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer { FleetStatusTests.stop(process) }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1500 })
            let ended = try DaemonHarness.count(connection, """
                SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'pushd-campaign-%'
                """)
            #expect(ended > 0)
            let endedAt = Timestamp()

            // Done well within the 60 s lease the forgotten chunks used to wait for.
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: id)?.status == .done },
                    "\(harness.mock.stats.accepted) accepted \(Timestamp().timeIntervalSince(endedAt)) s after the sessions ended")
            let tokens = harness.mock.acceptedLog.map(\.token)
            let twice = tokens.count - Set(tokens).count
            #expect(twice == 0, "\(twice) targets were sent twice; \(Set(tokens).count) of \(count) were sent")
            #expect(Set(tokens).count == count)
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == count, "the campaign counts \(campaign.sent) sent")
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(!text.contains("took over chunk"), "a chunk was taken over")
        }
    }
}
