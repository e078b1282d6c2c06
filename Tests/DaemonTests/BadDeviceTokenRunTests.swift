import APNs
import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A run of BadDeviceToken answers with none accepted in the environment is tokens of the
/// other environment (a campaign imported for the wrong one), not that many dead tokens:
/// pruning stops, what the run pruned is restored, and the rest fail with their tokens kept.
@Suite(.serialized) struct BadDeviceTokenRunTests {
    /// A campaign of 200 tokens of the other environment: APNs answers BadDeviceToken to
    /// each. Before: every one of the 150 registered tokens was pruned, silently but for the
    /// dead letters. Now at most `limit` are pruned at a time and restored after the run, one
    /// error line and `pushd_bad_device_token_runs_total` say what to check, and the
    /// campaign's targets fail with the reason — while the app's transactional notifications
    /// in the same environment are accepted between the campaign's answers, which end only
    /// the transactional lane's runs. An accepted notification ends a run: a single bad token
    /// after it is pruned as before.
    @Test func aCampaignOfTheOtherEnvironmentsTokensPrunesNoneOfThem() throws {
        let campaignTokens = (1...200).map { DaemonHarness.token(80_000 + $0) }
        let registered = Array(campaignTokens.prefix(150))
        let good = DaemonHarness.token(80_500)
        let dead = DaemonHarness.token(80_501)
        // tokens.bad_device_token_limit's default; the configuration file leaves it unset.
        let limit = 25
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(badDeviceTokens: Set(campaignTokens + [dead])))
            let connection = try database.connect()
            defer { connection.close() }
            try NotForTopicTests.register(connection, registered + [good, dead])
            let store = CampaignStore()
            let campaign = try store.create(connection, NewCampaign(app: "shop", name: "wrong environment", pushType: "alert",
                                                                    payload: #"{"aps":{"alert":"sale"}}"#))
            _ = try store.importTargets(connection, campaignID: campaign, targets: campaignTokens.map { (token: $0, payload: String?.none) })
            _ = try store.start(connection, id: campaign)
            // Good transactional work in the same environment, sent while the campaign is.
            let busy = (1...300).map { DaemonHarness.token(81_000 + $0) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', t, '{"aps":{"alert":"hi"}}' FROM unnest($1::text[]) t
                """, [busy])
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")

            let pruned = "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL"
            var maxInvalidated = 0
            #expect(try DaemonHarness.wait(seconds: 60) {
                maxInvalidated = max(maxInvalidated, try DaemonHarness.count(connection, pruned))
                return try store.campaign(connection, id: campaign)?.status == .done
            }, "\(daemon.text.suffix(3000))")
            let done = try #require(try store.campaign(connection, id: campaign))
            #expect(done.failedByReason == ["BadDeviceToken": campaignTokens.count], "\(done.failedByReason)")
            // Every token is live again, and the rows pruning recorded for tokens nobody
            // registered are gone.
            let stillPruned = try NotForTopicTests.waitUntilNonePruned(connection, maxInvalidated: &maxInvalidated)
            #expect(stillPruned == 0, "\(stillPruned) still pruned")
            #expect(maxInvalidated < limit, "\(maxInvalidated) tokens were pruned at once")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens") == registered.count + 2)
            // The transactional work may still be going out when the campaign is done.
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(busy.allSatisfy { harness.mock.stats.perToken[$0]?.accepted == 1 },
                    "\(busy.filter { harness.mock.stats.perToken[$0]?.accepted != 1 }.map { ($0.suffix(6), harness.mock.stats.perToken[$0]?.accepted ?? 0) })")

            // One error line naming the app, the environment, the count and what to check.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"bad_device_token_run\"") }
            #expect(lines.count == 1, "\(daemon.text.suffix(3000))")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "BadDeviceToken to \(limit) notifications of app shop from campaign \(campaign) in a row in sandbox",
                             "tokens of the other environment (production)", "pushd.device_tokens.environment",
                             "\"environment\":\"sandbox\"", "\"source\":\"campaign \(campaign)\"", "\"count\":\(limit)"] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = daemon.metrics()
                return metrics.contains(#"pushd_bad_device_token_runs_total{app="shop",environment="sandbox"} 1"#)
            }, "\(metrics.split(separator: "\n").filter { $0.contains("bad_device_token") })")
            #expect(metrics.contains(#"pushd_bad_device_token_runs_total{app="shop",environment="production"} 0"#))
            // Nothing is held: the answers blame the tokens' environment, not the app's configuration.
            #expect(!daemon.text.contains("\"event\":\"sending_held\""))

            // An accepted notification ends the run: a single dead token after it is pruned.
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')", [good])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')", [dead])
            #expect(try DaemonHarness.wait(seconds: 20) {
                try TokenStore().token(connection, app: "shop", token: dead)?.invalidReason == "BadDeviceToken"
            })
            #expect(harness.mock.stats.perToken[good]?.accepted == 1)
        }
    }
}
