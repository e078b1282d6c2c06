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

    /// Every notification to sandbox is answered Forbidden and none accepted there: that is APNs
    /// refusing the app's sandbox credentials, not the notifications, and not its production
    /// ones. `apns.forbidden_limit` - 1 of them fail, then sandbox alone is held, its other jobs
    /// kept unspent, while production keeps sending; the hold says so in an error line, the
    /// metric, `/readyz` and `pushd status`. It used to pause the whole app, every 5 minutes
    /// again, so refused sandbox credentials stopped production. A SIGHUP that changed nothing
    /// ends the hold, and the first Forbidden after it holds again, failing none (a new run of
    /// answers failed `forbidden_limit` - 1 more at every SIGHUP, one for the log file too);
    /// once APNs takes the sandbox credentials, the kept jobs go out once each. The real
    /// binary, a mock per environment.
    @Test func aRunOfForbiddenAnswersInSandboxHoldsOnlySandboxAndProductionKeepsSending() throws {
        let limit = 3
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database, sandboxFaults: FaultConfiguration(forbiddenReason: "Forbidden"))
            defer { hosts.sandbox.stop() }
            let config = try hosts.writeConfigFile()
            try String(contentsOfFile: config, encoding: .utf8)
                .replacingOccurrences(of: "  threads: 1\n", with: "  threads: 1\n  forbidden_limit: \(limit)\n")
                .write(toFile: config, atomically: true, encoding: .utf8)
            let connection = try database.connect()
            defer { connection.close() }
            try EnvironmentKeyTests.insert(connection, environment: "sandbox", tokens: 1...10)
            try EnvironmentKeyTests.insert(connection, environment: "production", tokens: 21...23)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: hosts.harness.directory + "/pushd.log")
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="Forbidden"} 1"#
            #expect(DaemonHarness.wait(seconds: 30) { daemon.metrics().contains(held) }, "\(daemon.text)")

            // Production is not held: what was queued and what comes after the trip goes out.
            try EnvironmentKeyTests.insert(connection, environment: "production", tokens: 24...26)
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'production'") == 0
            }, "\(daemon.text)")
            #expect(hosts.production.stats.accepted == 6)
            let metrics = daemon.metrics()
            for expected in [#"pushd_app_paused{app="shop"} 0"#,
                             #"pushd_sending_held{app="shop",environment="production",reason="Forbidden"} 0"#] {
                #expect(metrics.contains(expected), "no \(expected)")
            }
            // The run's first limit - 1 failed with the reason; the rest of sandbox is kept, unspent.
            let kept = "SELECT count(*) FROM pushd.jobs WHERE environment = 'sandbox' AND attempts = 0"
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, kept) == 10 - (limit - 1) },
                    "\((try? DaemonHarness.count(connection, kept)) ?? -1) kept")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason = '\(Self.failedReason)'") == limit - 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == limit - 1)
            #expect(hosts.sandbox.stats.accepted == 0)

            // One error line naming the app, the environment and what to check; no pause.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of every notification for app shop in sandbox is held",
                             "403 Forbidden to \(limit) notifications in a row in sandbox and accepted none",
                             "check the credentials the app uses for sandbox", "\"environment\":\"sandbox\"",
                             "\"scope\":\"environment\"", "\"reason\":\"Forbidden\""] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            #expect(!daemon.text.contains("is paused"), "\(daemon.text)")
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop every notification (sandbox): Forbidden")
            }, "\(daemon.readyz())")
            #expect(daemon.readyz().hasPrefix("ready:"))
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of every notification (sandbox) is held on") }
            }, "\(status.text)")

            // A SIGHUP with nothing changed (as for the log file) ends the hold; the first
            // Forbidden after it holds again, and no kept job is failed for it.
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 30) {
                daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }.count == 2
            }, "\(daemon.text)")
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains(held) })
            let failed = "SELECT count(*) FROM pushd.dead_jobs WHERE reason = '\(Self.failedReason)'"
            Thread.sleep(forTimeInterval: 2)
            #expect(try DaemonHarness.count(connection, failed) == limit - 1)
            #expect(try DaemonHarness.count(connection, kept) == 10 - (limit - 1))

            // APNs takes the sandbox credentials now; SIGHUP ends the hold and the kept jobs go out once each.
            try hosts.sandbox.setFaults(.none)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(hosts.sandbox.stats.accepted == 10 - (limit - 1))
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == limit - 1)
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="Forbidden"} 0"#)
            })
        }
    }
}
