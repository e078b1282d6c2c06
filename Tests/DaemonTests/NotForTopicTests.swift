import APNs
import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// DeviceTokenNotForTopic prunes a token only when it blames the token: not for a push to a
/// topic of its own (`.voip` …) sent to the app's alert token, and not in a run of them that
/// blames the topic (a wrong bundle_id), which holds the topic and restores what it pruned.
@Suite(.serialized) struct NotForTopicTests {
    static func live(_ connection: PGConnection, _ token: String) throws -> Bool {
        try TokenStore().token(connection, app: "shop", token: token)?.isLive == true
    }

    static func register(_ connection: PGConnection, _ tokens: [String]) throws {
        try connection.query("INSERT INTO pushd.device_tokens (app, token, environment) SELECT 'shop', t, 'sandbox' FROM unnest($1::text[]) t",
                             [tokens])
    }

    /// Waits up to 10 s for no token to be pruned and returns how many still are;
    /// `maxInvalidated` keeps the most seen pruned at once.
    static func waitUntilNonePruned(_ connection: PGConnection, maxInvalidated: inout Int) throws -> Int {
        var stillPruned = 0
        _ = try DaemonHarness.wait(seconds: 10) {
            stillPruned = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL")
            maxInvalidated = max(maxInvalidated, stillPruned)
            return stillPruned == 0
        }
        return stillPruned
    }

    /// A VoIP job and a VoIP campaign sent to the app's alert tokens are answered
    /// DeviceTokenNotForTopic: they fail with the reason, and the tokens stay live (an alert
    /// to one of them is accepted). An alert to a token of another app still prunes it.
    @Test func aVoIPPushToAnAlertTokenFailsAndKeepsTheTokenLive() throws {
        let alert = DaemonHarness.token(70_001)
        let foreign = DaemonHarness.token(70_002)
        let campaignTokens = (1...10).map(DaemonHarness.token)
        var topics = [alert: DaemonHarness.bundleID, foreign: "com.example.other"]
        for token in campaignTokens { topics[token] = DaemonHarness.bundleID }
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(tokenTopics: topics))
            let connection = try database.connect()
            defer { connection.close() }
            try Self.register(connection, [alert, foreign] + campaignTokens)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type)
                VALUES ('shop', $1, '{"aps":{},"caller":"Ann"}', 'voip'), ('shop', $2, '{"aps":{"alert":"hi"}}', 'alert')
                """, [alert, foreign])
            let store = CampaignStore()
            let campaign = try store.create(connection, NewCampaign(app: "shop", name: "calls", pushType: "voip",
                                                                    payload: #"{"aps":{},"caller":"Ann"}"#))
            _ = try store.importTargets(connection, campaignID: campaign, targets: campaignTokens.map { (token: $0, payload: String?.none) })
            _ = try store.start(connection, id: campaign)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
                    && store.campaign(connection, id: campaign)?.status == .done
            })
            let voip = try connection.query("SELECT reason FROM pushd.dead_jobs WHERE push_type = 'voip'").rows.map { try $0.require(0, as: String.self) }
            #expect(voip.count == 1)
            #expect(voip.first?.hasPrefix("DeviceTokenNotForTopic: APNs says the token is not a token of topic com.example.shop.voip; it is kept") == true,
                    "\(voip)")
            #expect(try Self.live(connection, alert), "the VoIP job's answer pruned the app's alert token")
            let done = try #require(try store.campaign(connection, id: campaign))
            #expect(done.failedByReason == ["DeviceTokenNotForTopic": 10] && done.pruned == 0, "\(done.failedByReason), pruned \(done.pruned)")
            #expect(try campaignTokens.allSatisfy { try Self.live(connection, $0) }, "the VoIP campaign's answers pruned alert tokens")

            // The normal case: an alert to a token of another app prunes it.
            #expect(try TokenStore().token(connection, app: "shop", token: foreign)?.invalidReason == "DeviceTokenNotForTopic")
            // The kept token works for the app's alerts.
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')", [alert])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.stats.perToken[alert]?.accepted == 1)
            // Ten answers in a row on the VoIP topic hold nothing (the limit is 25).
            #expect(pipeline.context.metrics.registry.expositionText()
                .contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="DeviceTokenNotForTopic"} 0"#))
        }
    }

    /// The app is configured with a wrong bundle_id: every answer is DeviceTokenNotForTopic.
    /// Ten jobs prune their tokens before a run shows the topic is wrong; the campaign that
    /// follows holds the topic after 25 answers in a row (the default limit), not after
    /// pruning its 200 targets. The tokens pruned are restored (a row recorded for a token
    /// nobody registered is removed), the log, `/metrics`, `/readyz` and `pushd status` say
    /// what to check, and after the fix and a restart the campaign's held targets go out.
    @Test func aWrongBundleIDHoldsTheTopicAfterARunAndRestoresTheTokensItPruned() throws {
        let jobTokens = (1...10).map(DaemonHarness.token)
        let campaignTokens = (11...210).map(DaemonHarness.token)
        // Registered: jobs 1…5 and campaign targets 11…160; the others came from a file.
        let registered = Array(jobTokens.prefix(5)) + Array(campaignTokens.prefix(150))
        let topics = Dictionary(uniqueKeysWithValues: (jobTokens + campaignTokens).map { ($0, DaemonHarness.bundleID) })
        // tokens.not_for_topic_limit's default; the configuration file leaves it unset.
        let limit = 25
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(tokenTopics: topics))
            let connection = try database.connect()
            defer { connection.close() }
            try Self.register(connection, registered)
            for token in jobTokens {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')", [token])
            }
            let good = try harness.writeConfigFile()
            let wrong = harness.directory + "/wrong-bundle.yml"
            try String(contentsOfFile: good, encoding: .utf8)
                .replacingOccurrences(of: "bundle_id: \(DaemonHarness.bundleID)", with: "bundle_id: com.example.shopp")
                .write(toFile: wrong, atomically: true, encoding: .utf8)
            var daemon = try TLSFailurePausesAppTests.Daemon(config: wrong, log: harness.directory + "/pushd.log")

            // Ten answers: under the limit, each blames its token.
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == 10)

            let store = CampaignStore()
            let campaign = try store.create(connection, NewCampaign(app: "shop", name: "sale", pushType: "alert",
                                                                    payload: #"{"aps":{"alert":"sale"}}"#))
            _ = try store.importTargets(connection, campaignID: campaign, targets: campaignTokens.map { (token: $0, payload: String?.none) })
            _ = try store.start(connection, id: campaign)
            var maxInvalidated = 0
            let pruned = "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL"
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="DeviceTokenNotForTopic"} 1"#
            #expect(DaemonHarness.wait(seconds: 30) {
                maxInvalidated = max(maxInvalidated, (try? DaemonHarness.count(connection, pruned)) ?? 0)
                return daemon.metrics().contains(held)
            }, "\(daemon.text)")
            // Every token is live again, none was pruned by the campaign, and the rows pruning
            // recorded for the job tokens nobody registered are gone.
            let stillPruned = try Self.waitUntilNonePruned(connection, maxInvalidated: &maxInvalidated)
            #expect(stillPruned == 0, "\(stillPruned) still pruned")
            #expect(maxInvalidated <= limit, "\(maxInvalidated) tokens were pruned at once")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens") == registered.count)
            // The counter follows the statement that restored them by a moment.
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = daemon.metrics()
                return PruneCountersTests.total(metrics, "pushd_tokens_restored_total") == 10
            }, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_tokens_") })")
            #expect(PruneCountersTests.total(metrics, "pushd_tokens_pruned_total") == 10)
            // The campaign is held, not failed through: at most the answers before the hold failed.
            Thread.sleep(forTimeInterval: 2)
            let waiting = try #require(try store.campaign(connection, id: campaign))
            #expect(waiting.status == .running && waiting.sent == 0 && waiting.pruned == 0)
            #expect(waiting.failed < limit, "\(waiting.failedByReason)")

            // One error line naming the app, the topic, the count and what to check.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of topic com.example.shopp for app shop in sandbox is held",
                             "DeviceTokenNotForTopic to \(limit) notifications in a row", "bundle_id", "restored",
                             "\"topic\":\"com.example.shopp\"", "\"reason\":\"DeviceTokenNotForTopic\"", "\"count\":\(limit)"] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop topic com.example.shopp (sandbox): DeviceTokenNotForTopic")
            }, "\(daemon.readyz())")
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of topic com.example.shopp (sandbox) is held on") }
            }, "\(status.text)")

            // A VoIP job meanwhile: the wrong bundle_id is wrong for its topic too. It is held
            // with the main topic at its first answer, kept, not failed (a run of its own failed
            // limit - 1 such jobs each time the hold ended).
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type)
                VALUES ('shop', $1, '{"aps":{}}', 'voip')
                """, [jobTokens[0]])
            #expect(DaemonHarness.wait(seconds: 30) {
                daemon.text.split(separator: "\n").contains { $0.contains("\"event\":\"sending_held\"") && $0.contains("\"topic\":\"com.example.shopp.voip\"") }
            }, "\(daemon.text.suffix(3000))")
            let voipLine = daemon.text.split(separator: "\n").first { $0.contains("\"topic\":\"com.example.shopp.voip\"") }.map(String.init) ?? ""
            #expect(voipLine.contains("while the app's main topic com.example.shopp is held"), "\(voipLine)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE push_type = 'voip'") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE push_type = 'voip'") == 1)

            // The fix: the right bundle_id, and a restart. The held targets go out, once each.
            FleetStatusTests.stop(daemon.process)
            daemon = try TLSFailurePausesAppTests.Daemon(config: good, log: harness.directory + "/pushd-fixed.log")
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: campaign)?.status == .done }, "\(daemon.text)")
            let done = try #require(try store.campaign(connection, id: campaign))
            #expect(done.sent + done.failed == campaignTokens.count && done.sent > campaignTokens.count - limit)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == 0)
            #expect(campaignTokens.allSatisfy { (harness.mock.stats.perToken[$0]?.accepted ?? 0) <= 1 })
        }
    }
}
