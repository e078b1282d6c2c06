import APNs
import Posix
import APNsMock
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

@Suite(.serialized) struct CampaignLaneTests {
    /// Creates a running campaign of `count` targets (tokens from `DaemonHarness.token(1...)`).
    /// The harness's configuration with the app `shop` capped at `rate` per second by its
    /// `campaign_rate`, which each worker paces (the lease schedule does not know it), written
    /// next to it; returns its path.
    static func configCapped(_ harness: DaemonHarness, rate: Int) throws -> String {
        var yaml = try String(contentsOfFile: try harness.writeConfigFile(), encoding: .utf8)
        let shop = "    bundle_id: \(DaemonHarness.bundleID)\n"
        #expect(yaml.contains(shop))
        yaml = yaml.replacingOccurrences(of: shop, with: shop + "    campaign_rate: \(rate)\n")
        let config = harness.directory + "/capped.yml"
        try yaml.write(toFile: config, atomically: true, encoding: .utf8)
        return config
    }

    static func campaign(_ connection: PGConnection, count: Int, rate: Int? = nil) throws -> Int64 {
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: "shop", name: "spring sale", pushType: "alert",
                                                          payload: #"{"aps":{"alert":{"title":"Sale","body":"20% off"}}}"#,
                                                          rateLimit: rate))
        let targets = (1...count).map { (token: DaemonHarness.token($0), payload: String?.none) }
        #expect(try store.importTargets(connection, campaignID: id, targets: targets).imported == count)
        #expect(try store.start(connection, id: id) == .running)
        return id
    }

    @Test func a100000TargetCampaignIsDeliveredCompletelyAndItsCountersAddUp() throws {
        let count = 100_000
        var unregistered = [String: Int64]()
        var bad = Set<String>()
        let learned = Int64(Timestamp().timeIntervalSince1970 * 1000) + 60_000
        for seed in stride(from: 7, through: count, by: 50) { unregistered[DaemonHarness.token(seed)] = learned }
        for seed in stride(from: 11, through: count, by: 97) where unregistered[DaemonHarness.token(seed)] == nil {
            bad.insert(DaemonHarness.token(seed))
        }
        let rejected = unregistered.count + bad.count
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database,
                                            faults: FaultConfiguration(unregisteredTokens: unregistered, badDeviceTokens: bad))
            let connection = try database.connect()
            // The rejected tokens are registered, so pruning has something to mark.
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment) SELECT 'shop', t, 'sandbox' FROM unnest($1::text[]) t
                """, [Array(unregistered.keys) + Array(bad)])
            let id = try Self.campaign(connection, count: count)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 240) { try store.campaign(connection, id: id)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: id))
            let stats = harness.mock.stats
            #expect(stats.accepted == count - rejected)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == count - rejected)
            #expect(campaign.targets == count)
            #expect(campaign.sent == count - rejected)
            #expect(campaign.failed == rejected)
            #expect(campaign.pruned == rejected)
            #expect(campaign.failedByReason == ["Unregistered": unregistered.count, "BadDeviceToken": bad.count])
            #expect(campaign.remaining == 0)
            #expect(campaign.finishedAt != nil)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == rejected)
        }
    }

    /// At a long round trip a worker must not wait for a chunk's answers before sending the
    /// next chunk: it keeps several chunks in flight (the gauge `pushd_campaign_chunks_sending`
    /// shows them), and every target is still sent exactly once.
    @Test func oneWorkerSendsTheNextChunksWhileTheAnswersOfThePreviousAreOnTheirWay() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 400))
            let connection = try database.connect()
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "far away", pushType: "alert",
                                                              payload: #"{"aps":{"alert":"hello"}}"#))
            let count = 1_000
            let targets = (1...count).map { (token: DaemonHarness.token($0), payload: String?.none) }
            #expect(try store.importTargets(connection, campaignID: id, targets: targets, chunkSize: 100).imported == count)
            #expect(try store.start(connection, id: id) == .running)
            var config = harness.config()
            config.campaignWorkers = 1
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            var most = 0.0
            let deadline = Timestamp().addingTimeInterval(60)
            while Timestamp() < deadline, try store.campaign(connection, id: id)?.status != .done {
                most = max(most, pipeline.context.metrics.chunksSending.value)
                Thread.sleep(forTimeInterval: 0.01)
            }
            #expect(try store.campaign(connection, id: id)?.status == .done)
            // Ten chunks of 100 answered after 400 ms each: one at a time, one worker never has two.
            #expect(most >= 3, "at most \(most) chunks were sending at once")
            #expect(harness.mock.stats.accepted == count)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == count)
            #expect(try store.campaign(connection, id: id)?.sent == count)
            // The last chunk's finish marks the campaign done; the gauge drops once the worker's
            // round of finishes is over, a moment later.
            #expect(DaemonHarness.wait(seconds: 5) { pipeline.context.metrics.chunksSending.value == 0 })
        }
    }

    /// The nice value of every thread of this process.
    static func threadNiceValues() -> [Int] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task in
            guard let stat = try? String(contentsOfFile: "/proc/self/task/\(task)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            // After "pid (comm) ": state is field 3, nice field 19.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 16 ? Int(fields[16]) : nil
        }
    }

    /// With `campaigns.niceness` set, the campaign lane gives way: its workers and its
    /// connections' event loops run at that nice value, the transactional lane's at the process's own.
    @Test func theCampaignLanesThreadsRunAtALowerPriorityThanTheTransactionalLanes() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let before = Self.threadNiceValues().filter { $0 == 10 }.count
            var config = harness.config()
            config.apns.threads = 1
            config.campaignNiceness = 10
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            // The threads lower their own priority as they start: waited for.
            let expected = config.campaignWorkers + 1
            _ = DaemonHarness.wait(seconds: 10) { Self.threadNiceValues().filter { $0 == 10 }.count - before >= expected }
            let values = Self.threadNiceValues()
            // Two campaign workers and the campaign client's one loop; everything else at 0.
            #expect(values.filter { $0 == 10 }.count - before == expected, "nice values: \(values)")
            #expect(values.filter { $0 == 0 }.count >= config.transactionalWorkers + 1)
        }
    }

    @Test func aCampaignWaitsForTransactionalJobsAndRespectsItsRateCap() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let id = try Self.campaign(connection, count: 600, rate: 200)
            let pipeline = try harness.pipeline()
            let started = Timestamp()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            // A transactional push sent while the campaign runs is not held up behind it.
            Thread.sleep(forTimeInterval: 0.5)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"now\"}}')",
                                 [DaemonHarness.token(999_999)])
            let inserted = Timestamp()
            #expect(DaemonHarness.wait(seconds: 5) { harness.mock.acceptedLog.contains { $0.token == DaemonHarness.token(999_999) } })
            let waited = Timestamp().timeIntervalSince(inserted)
            // Judged by order, not time (a loaded machine slows the capped campaign as well): held
            // behind the campaign, the push would come after its last target; it goes while most
            // of the campaign is still to be sent.
            let order = harness.mock.acceptedLog
            let position = try #require(order.firstIndex { $0.token == DaemonHarness.token(999_999) })
            // Everything before it is the campaign's.
            let campaignAfter = 600 - position
            #expect(campaignAfter >= 50, "the push was accepted \(waited) s after its INSERT, with \(campaignAfter) campaign targets left to send")

            #expect(try DaemonHarness.wait(seconds: 30) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            // 600 targets at 200 per second take about three seconds, never much less.
            #expect(Timestamp().timeIntervalSince(started) >= 2.4)
            #expect(harness.mock.stats.accepted == 601)
            // The lanes use separate connections: the push never shared a connection's
            // streams with the campaign.
            let log = harness.mock.acceptedLog
            let pushConnection = try #require(log.first { $0.token == DaemonHarness.token(999_999) }).connectionID
            #expect(!log.filter { $0.token != DaemonHarness.token(999_999) }.contains { $0.connectionID == pushConnection })
        }
    }

    @Test func anAPNsOutageFailsNoTargetAndTheCampaignFinishesWhenAPNsIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            harness.mock.stop()
            let id = try Self.campaign(connection, count: 1500)
            var config = harness.config()
            config.retry.maxAttempts = 2
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            // Sends without an answer come back within a second; two of them would spend the
            // budget of two attempts if they counted.
            Thread.sleep(forTimeInterval: 3)
            var campaign = try #require(try CampaignStore().campaign(connection, id: id))
            #expect(campaign.failed == 0 && campaign.sent == 0 && campaign.status == .running)
            try harness.restartMock()
            #expect(try DaemonHarness.wait(seconds: 60) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            campaign = try #require(try CampaignStore().campaign(connection, id: id))
            #expect(campaign.sent == 1500 && campaign.failed == 0)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 1500)
        }
    }

    @Test func aChunkPacedLongerThanItsLeaseKeepsItAndIsSentOnce() throws {
        try IsolatedDatabase.with { database in
            // Answers take 6 s, so the chunk is still open for seconds after the campaign's pacing
            // allows the next lease (400 / 80 = 5 s after this one): an idle worker polling then
            // would take the chunk over if its lease had not been renewed while it was paced.
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 6000))
            let connection = try database.connect()
            // 400 targets in one chunk at 80 per second: 5 s of sending, the lease is 3 s, and a
            // second campaign worker is waiting for chunks whose lease ran out.
            let id = try Self.campaign(connection, count: 400, rate: 80)
            let pipeline = try harness.pipeline()
            #expect(harness.config().campaignWorkers >= 2)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 30) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            #expect(harness.mock.stats.accepted == 400)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 400)
        }
    }

    @Test func pauseStopsSendingAndResumeFinishesTheCampaign() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let id = try Self.campaign(connection, count: 3000, rate: 500)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let store = CampaignStore()
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.accepted >= 500 })
            #expect(try store.pause(connection, id: id) == .paused)
            Thread.sleep(forTimeInterval: 2.5)
            let atPause = harness.mock.stats.accepted
            Thread.sleep(forTimeInterval: 1.5)
            #expect(harness.mock.stats.accepted == atPause)
            #expect(atPause < 3000)
            #expect(try store.resume(connection, id: id) == .running)
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 3000)
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 3000)
        }
    }

    /// A chunk stopped while some of its targets wait for a retry (here after a 500) is
    /// released past every target already sent: the waiting ones are parked, so the worker
    /// that leases the chunk next sends none of the others again. Released at its first
    /// unresolved target, each pause or stop sent the targets after it twice.
    @Test(arguments: [StopKind.pause, .restart])
    func aChunkStoppedWithRetriesWaitingSendsNoTargetTwice(_ stop: StopKind) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(internalServerErrorRate: 0.05))
            let connection = try database.connect()
            let count = 3000
            let id = try Self.campaign(connection, count: count, rate: 500)
            var config = harness.config()
            // Retries wait long enough that some always do when the chunk stops.
            config.retry.baseDelayMilliseconds = 500
            config.retry.maxDelayMilliseconds = 1500
            var pipeline = try harness.pipeline(config)
            pipeline.start()
            let store = CampaignStore()
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.accepted >= 700 })
            switch stop {
            case .pause:
                #expect(try store.pause(connection, id: id) == .paused)
                Thread.sleep(forTimeInterval: 2.5)
                #expect(try store.resume(connection, id: id) == .running)
            case .restart:
                pipeline.stop(deadline: Timestamp().addingTimeInterval(5))
                pipeline = try harness.pipeline(config)
                pipeline.start()
            }
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(Set(accepted).count == count)
            #expect(accepted.count == count, "\(accepted.count - Set(accepted).count) targets were accepted twice")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == count)
            #expect(campaign.remaining == 0)
        }
    }

    enum StopKind: String, CustomTestStringConvertible, Sendable {
        case pause, restart
        var testDescription: String { rawValue }
    }
}
