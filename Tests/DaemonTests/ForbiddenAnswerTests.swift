import APNs
import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// 403 Forbidden ("the specified action is not allowed") is about the request unless a run of
/// them says the credentials are refused. It used to pause the app for 5 minutes with the job
/// kept unspent, then send it again and pause again, forever, for one notification APNs refuses.
@Suite(.serialized) struct ForbiddenAnswerTests {
    static let failedReason = "Forbidden: APNs answered 403 Forbidden: the action is not allowed; not retried"

    /// One token's notifications are answered Forbidden, the others' accepted: the job and the
    /// campaign target to it fail once each with the reason, nothing is sent to it again, the
    /// app never pauses and every other notification goes out. The real binary, the real mock.
    @Test func aForbiddenNotificationFailsOnceAndTheAppKeepsSending() throws {
        let forbidden = DaemonHarness.token(40_301)
        let others = (1...8).map(DaemonHarness.token)
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenTokens: [forbidden]))
            let connection = try database.connect()
            defer { connection.close() }
            for token in [forbidden] + others {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')", [token])
            }
            let store = CampaignStore()
            let campaign = try store.create(connection, NewCampaign(app: "shop", name: "sale", pushType: "alert",
                                                                    payload: #"{"aps":{"alert":"sale"}}"#))
            _ = try store.importTargets(connection, campaignID: campaign, targets: ([forbidden] + others).map { (token: $0, payload: String?.none) })
            _ = try store.start(connection, id: campaign)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")

            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
                    && store.campaign(connection, id: campaign)?.status == .done
            }, "\(daemon.text)")
            let dead = try connection.query("SELECT device_token, reason FROM pushd.dead_jobs").rows
                .map { (try $0.require(0, as: String.self), try $0.require(1, as: String.self)) }
            #expect(dead.count == 1 && dead.first?.0 == forbidden && dead.first?.1 == Self.failedReason, "\(dead)")
            let done = try #require(try store.campaign(connection, id: campaign))
            #expect(done.sent == others.count && done.failedByReason == ["Forbidden": 1], "sent \(done.sent), \(done.failedByReason)")
            #expect(others.allSatisfy { harness.mock.stats.perToken[$0]?.accepted == 2 })
            // Not sent again: one answer per lane, and no more after a while.
            Thread.sleep(forTimeInterval: 2)
            #expect(harness.mock.stats.perToken[forbidden]?.rejected == 2, "\(String(describing: harness.mock.stats.perToken[forbidden]))")

            let metrics = daemon.metrics()
            for expected in [#"pushd_app_paused{app="shop"} 0"#,
                             #"pushd_apns_responses_total{app="shop",environment="sandbox",status="403",reason="Forbidden"} 2"#,
                             #"pushd_dead_letters_total{app="shop",lane="transactional",reason="Forbidden"} 1"#,
                             #"pushd_dead_letters_total{app="shop",lane="campaign",reason="Forbidden"} 1"#] {
                #expect(metrics.contains(expected), "no \(expected)")
            }
            // One warning line saying what happened, rate-limited per app and environment; no pause.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains(#""event":"apns_forbidden""#) }
            #expect(lines.count == 1, "\(daemon.text)")
            for expected in [#""level":"warning""#, "APNs answered 403 Forbidden to a notification of app shop in sandbox",
                             "failed, not sent again", #""app":"shop""#] {
                #expect(lines.first?.contains(expected) == true, "no \(expected) in \(lines)")
            }
            #expect(!daemon.text.contains("sending for app shop is paused"), "\(daemon.text)")
        }
    }

    /// A broadcast answered Forbidden fails with the reason and is not sent again; the app's
    /// device pushes go on and nothing pauses.
    @Test func aBroadcastAnsweredForbiddenFailsOnceAndTheAppKeepsSending() throws {
        let channel = "Zm9yYmlkZGVu"
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenChannels: [channel]))
            let pipeline = try harness.pipeline()
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, BroadcastDaemonTests.update])
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE channel_id IS NOT NULL AND reason = '\(Self.failedReason)'") == 1
            })
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(9)])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 1)
            #expect(harness.mock.stats.rejected("Forbidden") == 1)
            #expect(harness.mock.stats.perToken[DaemonHarness.token(9)]?.accepted == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0)
            #expect(pipeline.context.pausedApps().isEmpty)
            #expect(pipeline.context.metrics.registry.expositionText()
                .contains(#"pushd_dead_letters_total{app="shop",lane="broadcast",reason="Forbidden"} 1"#))
        }
    }

    /// Every notification is answered Forbidden and none accepted: that is APNs refusing the
    /// credentials, not the notifications. `apns.forbidden_limit` - 1 of them fail, then the app
    /// pauses with the rest kept unspent, and stays paused.
    @Test func aRunOfForbiddenAnswersWithNoneAcceptedPausesTheAppAndKeepsItsJobs() throws {
        let limit = 3
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenReason: "Forbidden"))
            var config = harness.config()
            config.forbiddenLimit = limit
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(config, log: log)
            let connection = try database.connect()
            defer { connection.close() }
            for seed in 1...10 {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                     [DaemonHarness.token(seed)])
            }
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let sender = try #require(pipeline.context.senders["shop"])
            #expect(DaemonHarness.wait(seconds: 20) { sender.pausedReason != nil })
            Thread.sleep(forTimeInterval: 1)
            #expect(sender.pausedReason?.hasPrefix("APNs answered 403 Forbidden to \(limit) notifications in a row in sandbox and accepted none: taken as APNs refusing the app's credentials") == true,
                    "\(sender.pausedReason ?? "not paused")")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason = '\(Self.failedReason)'") == limit - 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE attempts = 0") == 10 - (limit - 1))
            #expect(pipeline.context.pausedApps() == ["shop"])
            #expect(pipeline.context.metrics.registry.expositionText().contains(#"pushd_app_paused{app="shop"} 1"#))
            let paused = log.lines.filter { $0.contains("sending for app shop is paused") }
            #expect(paused.count == 1 && paused.first?.contains("403 Forbidden to \(limit) notifications in a row") == true, "\(log.lines)")
        }
    }
}
