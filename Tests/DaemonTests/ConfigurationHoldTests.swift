import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Answers that blame the app's configuration (TopicDisallowed, CannotCreateChannelConfig)
/// hold the scope they concern instead of failing its notifications one by one: the work is
/// kept, the operator is told what to fix, and after the fix everything is delivered once.
@Suite(.serialized) struct ConfigurationHoldTests {
    /// APNs refuses the app's topic to its key (a key of another team, a wrong bundle_id): a
    /// transactional job and a 2,000-target campaign are held, not dead-lettered or failed;
    /// the other app of the same daemon keeps sending; the log line, the metric, `/readyz` and
    /// `pushd status` say why. Once APNs takes the topic, a SIGHUP sends everything once.
    @Test func aDisallowedTopicHoldsItsJobAndCampaignUntilFixedThenDeliversEverythingOnce() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, allowedBundleIDs: ["com.example.news"])
            let connection = try database.connect()
            defer { connection.close() }
            let targets = 2000
            let campaign = try CampaignLaneTests.campaign(connection, count: targets)
            let shopToken = DaemonHarness.token(900_001)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"shipped\"}}')",
                                 [shopToken])
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('news', $1, '{\"aps\":{\"alert\":\"news\"}}')",
                                 [DaemonHarness.token(900_002)])
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try FleetStatusTests.configWithNews(harness),
                                                             log: harness.directory + "/pushd.log")
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="TopicDisallowed"} 1"#
            #expect(DaemonHarness.wait(seconds: 30) { daemon.metrics().contains(held) }, "\(daemon.text)")
            // The other app is not held: its job goes out.
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE app = 'news'") == 0
            })
            // Give the campaign's workers time to have burnt through its targets, as they did before.
            Thread.sleep(forTimeInterval: 3)

            // Nothing of the held topic was failed, dead-lettered or lost.
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE app = 'shop' AND attempts = 0") == 1)
            let waiting = try #require(try CampaignStore().campaign(connection, id: campaign))
            #expect(waiting.failed == 0 && waiting.sent == 0, "sent \(waiting.sent), failed \(waiting.failed): \(waiting.failedByReason)")
            #expect(waiting.status == .running)
            #expect(harness.mock.stats.accepted == 1)
            #expect(harness.mock.stats.rejected("TopicDisallowed") >= 1)

            // One error line that names the app, the environment, the topic, the reason and the fix.
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"sending_held\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            let line = String(lines.first ?? "")
            for expected in ["\"level\":\"error\"", "sending of topic com.example.shop for app shop in sandbox is held",
                             "TopicDisallowed", "bundle_id", "team", "SIGHUP", "\"topic\":\"com.example.shop\"",
                             "\"environment\":\"sandbox\"", "\"reason\":\"TopicDisallowed\""] {
                #expect(line.contains(expected), "no \(expected) in \(line)")
            }
            // /readyz stays ready (the rest sends) and names the held topic.
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.readyz().contains("held: app shop topic com.example.shop (sandbox): TopicDisallowed")
            }, "\(daemon.readyz())")
            #expect(daemon.readyz().hasPrefix("ready:"))
            // pushd status names it as a problem, read from the instance's heartbeat.
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 15) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("app shop: sending of topic com.example.shop (sandbox) is held on") }
            }, "\(status.text)")
            #expect(status.exitCode == 1)
            let paused = status.json["paused_apps"] as? [[String: Any]] ?? []
            #expect(paused.contains { $0["app"] as? String == "shop" && $0["scope"] as? String == "topic com.example.shop (sandbox)" },
                    "\(paused)")

            // The fix: APNs lets the key push to the topic now. SIGHUP ends the hold.
            let before = harness.mock.stats
            try harness.restartMock(allowedBundleIDs: ["com.example.shop", "com.example.news"])
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 60) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
                    && CampaignStore().campaign(connection, id: campaign)?.status == .done
            }, "\(daemon.text)")
            let done = try #require(try CampaignStore().campaign(connection, id: campaign))
            #expect(done.sent == targets && done.failed == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            // Exactly once: every target and the job accepted once, nothing else.
            let after = harness.mock.stats
            #expect(before.accepted == 1)
            #expect(after.accepted == targets + 1)
            #expect(after.perToken[shopToken]?.accepted == 1)
            #expect((1...targets).allSatisfy { after.perToken[DaemonHarness.token($0)]?.accepted == 1 })
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="TopicDisallowed"} 0"#)
            })
            #expect(daemon.text.contains("resumed sending of topic com.example.shop for app shop in sandbox"))
        }
    }

    /// A certificate that covers the app but not its VoIP topic: the VoIP jobs are held, the
    /// app's alerts keep going, and once the topic is allowed the VoIP jobs go out once each.
    @Test func aHeldVoIPTopicLeavesTheAppsAlertsSendingAndKeepsItsJobs() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, disallowedTopics: ["com.example.shop.voip"])
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type)
                SELECT 'shop', $1 || lpad(to_hex(g), 8, '0'), '{"aps":{},"caller":"Ann"}', 'voip' FROM generate_series(1, 3) g
                """, [String(repeating: "a", count: 56)])
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="TopicDisallowed"} 1"#
            #expect(DaemonHarness.wait(seconds: 20) { pipeline.context.metrics.registry.expositionText().contains(held) })
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', $1 || lpad(to_hex(g), 8, '0'), '{"aps":{"alert":"hi"}}' FROM generate_series(1, 3) g
                """, [String(repeating: "b", count: 56)])
            // The app's other topic is not held.
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE push_type = 'alert'") == 0
            })
            #expect(harness.mock.acceptedLog.map(\.topic) == Array(repeating: "com.example.shop", count: 3))
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE push_type = 'voip' AND attempts = 0") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)

            // The fix, then a SIGHUP's resume: the held jobs go out within their 30 s.
            try harness.restartMock(allowedBundleIDs: [])
            pipeline.resumePausedApps()
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.acceptedLog.map(\.topic) == Array(repeating: "com.example.shop.voip", count: 3))
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        }
    }

    /// Every row of `pushd.jobs` with the version it is at (`xmin`, `ctid`): a claim deletes a
    /// row and its retry inserts it again, so a row rewritten in between shows a new version.
    static func rowVersions(_ connection: PGConnection) throws -> String {
        try connection.query("SELECT coalesce(md5(string_agg(id || ':' || xmin || ':' || ctid, ',' ORDER BY id)), '') FROM pushd.jobs")
            .require(String.self, row: 0, column: 0)
    }

    /// The value of an unlabelled-by-app series in an exposition, 0 when absent.
    static func value(_ exposition: String, _ series: String) -> Double {
        exposition.split(separator: "\n").first { $0.hasPrefix(series + " ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
    }

    /// A backlog of a held topic is put back once for the hold, a set of rows at a time, and
    /// then left alone: not claimed, deleted and inserted again each 30 s while the hold lasts
    /// (20,000 jobs cost 40,000 row writes per 30 s that way). It stays counted as waiting, and
    /// once the topic is allowed a resume (SIGHUP) sends every job once.
    @Test func aHeldTopicsBacklogIsPutBackOnceForTheHoldNotRewrittenEvery30Seconds() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, disallowedTopics: ["com.example.shop.voip"])
            var config = harness.config()
            config.transactionalWorkers = 2
            config.batchSize = 200
            let pipeline = try harness.pipeline(config)
            let connection = try database.connect()
            defer { connection.close() }
            let count = 20_000
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type)
                SELECT 'shop', $1 || lpad(to_hex(g), 8, '0'), '{"aps":{},"caller":"Ann"}', 'voip' FROM generate_series(1, \(count)) g
                """, [String(repeating: "c", count: 56)])
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let metrics = { pipeline.context.metrics.registry.expositionText() }
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="TopicDisallowed"} 1"#
            #expect(DaemonHarness.wait(seconds: 20) { metrics().contains(held) })
            // Every job is put back, unspent, until the hold ends.
            let putBack = "SELECT count(*) FROM pushd.jobs WHERE starts_with(last_error, 'sending held: ') AND run_at > now() AND attempts = 0"
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, putBack) == count })
            // Most of them by the set-based statement, not by claims: only the first batches were claimed.
            let claimed = #"pushd_jobs_claimed_total{lane="transactional"}"#
            let claimedBefore = Self.value(metrics(), claimed)
            #expect(claimedBefore < Double(count / 2), "claimed \(claimedBefore) of \(count) held jobs")
            // Past a 30 s cycle: no row was rewritten, none claimed again.
            let before = try Self.rowVersions(connection)
            Thread.sleep(forTimeInterval: 35)
            #expect(try Self.rowVersions(connection) == before, "the held jobs' rows were rewritten during the hold")
            #expect(Self.value(metrics(), claimed) == claimedBefore)
            #expect(try DaemonHarness.count(connection, putBack) == count)
            // Still visible as waiting work of the app, not as jobs scheduled for later.
            #expect(DaemonHarness.wait(seconds: 5) {
                metrics().contains(#"pushd_queue_app_depth{app="shop",lane="transactional"} \#(count)"#)
            }, "\(metrics().split(separator: "\n").filter { $0.contains("queue_app") })")
            #expect(metrics().contains(held))
            #expect(harness.mock.stats.accepted == 0)

            // The fix, then a SIGHUP's resume: every held job goes out, once.
            try harness.restartMock(allowedBundleIDs: [])
            pipeline.resumePausedApps()
            #expect(try DaemonHarness.wait(seconds: 120) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.stats.accepted == count)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == count)
            #expect(harness.mock.acceptedLog.allSatisfy { $0.topic == "com.example.shop.voip" })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        }
    }

    /// At APNs's channel limit a creation is held, pending rather than failed; deleting a
    /// channel makes room, and the held creation goes through without an operator.
    @Test func aCreationBeyondTheChannelLimitWaitsForADeletionInsteadOfFailing() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, maxChannelsPerApp: 1)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            let first = try connection.query("SELECT pushd.create_channel('shop')").require(Int64.self, row: 0, column: 0)
            #expect(DaemonHarness.wait(seconds: 20) {
                (try? connection.query("SELECT state FROM pushd.channels WHERE id = $1", [first]).require(String.self, row: 0, column: 0)) == "active"
            })
            let second = try connection.query("SELECT pushd.create_channel('shop')").require(Int64.self, row: 0, column: 0)
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="CannotCreateChannelConfig"} 1"#
            #expect(DaemonHarness.wait(seconds: 20) { pipeline.context.metrics.registry.expositionText().contains(held) })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'failed'") == 0)
            // The hold is set a moment before the request's row is put back with its outcome.
            #expect(DaemonHarness.wait(seconds: 10) {
                let outcome = try? connection.query("SELECT state, coalesce(outcome, '') FROM pushd.channels WHERE id = $1", [second])
                return (try? outcome?.require(String.self, row: 0, column: 0)) == "pending_create"
                    && (try? outcome?.require(String.self, row: 0, column: 1))??.contains("CannotCreateChannelConfig") == true
            })

            let channel = try connection.query("SELECT channel_id FROM pushd.channels WHERE id = $1", [first]).require(String.self, row: 0, column: 0)
            try connection.query("SELECT pushd.delete_channel('shop', $1)", [channel])
            #expect(DaemonHarness.wait(seconds: 60) {
                (try? connection.query("SELECT state FROM pushd.channels WHERE id = $1", [second]).require(String.self, row: 0, column: 0)) == "active"
            })
            #expect(pipeline.context.metrics.registry.expositionText()
                .contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="CannotCreateChannelConfig"} 0"#))
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'failed'") == 0)
        }
    }

    /// The bundle id lacks the Broadcast Push capability: APNs answers FeatureNotEnabled to its
    /// channel requests and broadcasts. Both are held, not failed, the app's device pushes keep
    /// going, and once the capability is on a resume carries out what was held, once.
    @Test func broadcastsOfAnAppWithoutTheCapabilityAreHeldWhileItsDevicePushesGoOn() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, broadcastDisabledBundleIDs: [DaemonHarness.bundleID])
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            let created = try connection.query("SELECT pushd.create_channel('shop')").require(Int64.self, row: 0, column: 0)
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [channel, BroadcastDaemonTests.update])
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="FeatureNotEnabled"} 1"#
            #expect(DaemonHarness.wait(seconds: 20) { pipeline.context.metrics.registry.expositionText().contains(held) })
            // The app's device pushes are not held.
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(7)])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(harness.mock.stats.accepted == 1)
            // Both requests waited a while: neither was failed, dead-lettered or spent.
            Thread.sleep(forTimeInterval: 2)
            #expect(harness.mock.stats.rejected("FeatureNotEnabled") >= 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs WHERE attempts = 0") == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'failed'") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE id = \(created) AND state = 'pending_create'") == 1)
            #expect(harness.mock.stats.broadcastsAccepted[channel] == nil)

            // The capability is turned on in the developer account; the operator resumes (SIGHUP).
            try harness.restartMock(allowedBundleIDs: [])
            harness.mock.adoptChannel(bundleID: DaemonHarness.bundleID, channelID: channel, storagePolicy: .noMessageStored)
            // A resume makes what waited due at once, not after the rest of its 30 s wait.
            let resumed = Timestamp()
            pipeline.resumePausedApps()
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.broadcastsAccepted[channel] == 1 })
            #expect(DaemonHarness.wait(seconds: 10) {
                (try? connection.query("SELECT state FROM pushd.channels WHERE id = $1", [created]).require(String.self, row: 0, column: 0)) == "active"
            })
            #expect(Timestamp().timeIntervalSince(resumed) < 10)
            // The mock counts the broadcast when it answers; the row goes once pushd has the answer.
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs") == 0 })
            #expect(harness.mock.stats.broadcastsAccepted[channel] == 1)
            #expect(DaemonHarness.wait(seconds: 10) { pipeline.context.metrics.registry.expositionText()
                .contains(#"pushd_sending_held{app="shop",environment="sandbox",reason="FeatureNotEnabled"} 0"#) })
        }
    }
}
