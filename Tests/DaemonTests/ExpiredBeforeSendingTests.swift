import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A notification whose apns-expiration passed while it waited (queued, scheduled past it,
/// held through an outage) is not sent: APNs would take it and deliver it late. It fails with
/// reason `Expired`, in every lane; one still in time, or with expiration 0, goes.
@Suite(.serialized) struct ExpiredBeforeSendingTests {
    @Test func expiredJobsCampaignTargetsAndBroadcastsFailUnsent() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let (process, _) = try OutageRecoveryTests.startPushd(harness)
            defer { FleetStatusTests.stop(process) }

            // Transactional: one expired an hour ago, one scheduled past its expiration, one in
            // time, one with expiration 0 (deliver once, now).
            let expired = DaemonHarness.token(70001), late = DaemonHarness.token(70002)
            let inTime = DaemonHarness.token(70003), once = DaemonHarness.token(70004)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, expiration) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"x\"}}', now() - interval '1 hour')", [expired])
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, expiration, run_at) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"x\"}}', now() + interval '1 second', now() + interval '3 seconds')", [late])
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, expiration) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"x\"}}', now() + interval '1 hour')", [inTime])
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, expiration) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"x\"}}', to_timestamp(0))", [once])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            let accepted = Set(harness.mock.acceptedLog.map(\.token))
            #expect(accepted == [inTime, once], "accepted: \(accepted)")
            let dead = try connection.query("SELECT device_token, reason FROM pushd.dead_jobs ORDER BY device_token")
            let reasons = (0..<dead.rowCount).map { (try? dead.require(String.self, row: $0, column: 1)) ?? "" }
            #expect(dead.rowCount == 2 && reasons.allSatisfy { $0.hasPrefix("Expired: its apns-expiration") }, "\(reasons)")

            // A campaign whose expiration passed before it was started: every target fails unsent.
            let targets = 500
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "late sale", pushType: "alert",
                                                              payload: #"{"aps":{"alert":"sale"}}"#))
            _ = try store.importTargets(connection, campaignID: id, targets: (1...targets).map { (token: DaemonHarness.token(80000 + $0), payload: String?.none) })
            try connection.query("UPDATE pushd.campaigns SET expiration = now() - interval '1 minute' WHERE id = $1", [id])
            #expect(try store.start(connection, id: id) == .running)
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: id)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 0 && campaign.failed == targets && campaign.failedByReason == [OutcomePolicy.expiredLabel: targets],
                    "sent \(campaign.sent), failed \(campaign.failedByReason)")
            #expect(harness.mock.stats.accepted == 2)

            // A broadcast that expired before it could be sent.
            let row = try connection.query("SELECT pushd.create_channel('shop', 'most-recent')").require(Int64.self, row: 0, column: 0)
            var channel: String?
            #expect(DaemonHarness.wait(seconds: 20) {
                channel = try? connection.query("SELECT channel_id FROM pushd.channels WHERE id = $1 AND state = 'active'", [row])
                    .require(String.self, row: 0, column: 0)
                return channel != nil
            })
            let channelID = try #require(channel)
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority, expiration) VALUES ('shop', $1, $2, 5, now() - interval '1 minute')",
                                 [channelID, BroadcastDaemonTests.update])
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE channel_id IS NOT NULL AND reason LIKE 'Expired:%'") == 1
            })
            #expect(harness.mock.stats.broadcastsAccepted[channelID] == nil)
        }
    }
}
