import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// Another session holding `pushd.jobs` locked (a long migration, a manual `LOCK TABLE`) stops
/// every claim of the transactional lane. The real `pushd` must keep answering scrapes within a
/// scrape time-out (its own metrics, and the last queue statistics marked by their age), turn
/// `/readyz` not ready naming the lane, and send everything once after the lock ends.
@Suite(.serialized) struct TableLockVisibilityTests {
    static func timedGet(_ daemon: TLSFailurePausesAppTests.Daemon, _ path: String) -> (body: String, seconds: Double) {
        let started = Timestamp()
        let body = daemon.get(path)
        return (body, Timestamp().timeIntervalSince(started))
    }

    @Test func aLockOnTheJobsTableKeepsScrapesAnsweringAndMakesTheLaneNotReady() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(),
                                                             log: harness.directory + "/pushd-table-lock.log")
            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("database reachable") }, "\(daemon.readyz())\n\(daemon.text)")
            let connection = try database.connect()
            try TLSFailurePausesAppTests.enqueue(connection, count: 1)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1 }, "\(daemon.text)")
            // A scrape before the lock, so that there are queue statistics to serve during it.
            #expect(daemon.metrics().contains("pushd_queue_depth{lane=\"transactional\"}"))

            // Jobs due in 2 s, while the table is locked.
            let jobs = 20
            for seed in 0..<jobs {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, run_at) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}', now() + interval '2 seconds')",
                                     [DaemonHarness.token(20_000 + seed)])
            }
            let locker = try database.connect()
            _ = try locker.execute(script: "BEGIN; LOCK TABLE pushd.jobs IN ACCESS EXCLUSIVE MODE")
            let lockerPID = locker.backendPID
            let lockedAt = Timestamp()
            let holdSeconds = 24.0

            var slowScrapes: [String] = []
            var scrapesWithoutProcessMetrics = 0
            var scrapes = 0
            var notReadyAfter: Double?
            var readyzDuringLock = ""
            while Timestamp().timeIntervalSince(lockedAt) < holdSeconds {
                let scrape = Self.timedGet(daemon, "/metrics")
                scrapes += 1
                if scrape.seconds > 3 { slowScrapes.append("\(Timestamp().timeIntervalSince(lockedAt).fixed(1))s into the lock: \(scrape.seconds.fixed(1))s") }
                if !scrape.body.contains("\nprocess_cpu_seconds_total ") { scrapesWithoutProcessMetrics += 1 }
                let readyz = Self.timedGet(daemon, "/readyz")
                if readyz.seconds > 3 { slowScrapes.append("/readyz \(readyz.seconds.fixed(1))s") }
                if notReadyAfter == nil, readyz.body.contains("transactional lane") {
                    notReadyAfter = Timestamp().timeIntervalSince(lockedAt)
                    readyzDuringLock = readyz.body
                }
                PosixThread.sleep(seconds: 0.5)
            }
            let lastScrape = daemon.metrics()
            _ = try locker.execute(script: "COMMIT")
            print("during the lock: \(scrapes) scrapes, slow: \(slowScrapes); /readyz named the lane after \(notReadyAfter.map { "\($0.fixed(1))s" } ?? "never"): \(readyzDuringLock)")

            #expect(slowScrapes.isEmpty, "scrapes over 3 s during the lock: \(slowScrapes)")
            #expect(scrapesWithoutProcessMetrics == 0, "\(scrapesWithoutProcessMetrics) of \(scrapes) scrapes had no process metrics")
            #expect(lastScrape.contains("pushd_queue_depth{lane=\"transactional\"}"), "queue statistics missing from a scrape during the lock")
            let age = lastScrape.split(separator: "\n").first { $0.hasPrefix("pushd_queue_stats_age_seconds ") }
                .flatMap { Double($0.split(separator: " ")[1]) }
            #expect((age ?? 0) > 5, "pushd_queue_stats_age_seconds during the lock: \(age.map { "\($0)" } ?? "absent")")
            #expect(lastScrape.contains("pushd_lane_stuck{lane=\"transactional\"} 1"), "pushd_lane_stuck during the lock")
            #expect(notReadyAfter.map { $0 < 20 } == true, "/readyz did not name the transactional lane within 20 s of the lock")
            #expect(readyzDuringLock.contains("lock"), "/readyz during the lock: \(readyzDuringLock)")
            let stuckLines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"lane_stuck\"") }
            #expect(stuckLines.count == 1 && stuckLines.first?.contains("\"level\":\"error\"") == true, "\(daemon.text)")
            #expect(stuckLines.first?.contains("held by pid \(lockerPID)") == true, "\(stuckLines)")

            // After the lock: everything sent once, ready again.
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1 + jobs }, "\(harness.mock.stats.accepted)\n\(daemon.text)")
            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 15) {
                readyz = daemon.readyz()
                return readyz.contains("database reachable")
            }, "\(readyz)")
            PosixThread.sleep(seconds: 1)
            #expect(harness.mock.stats.accepted == 1 + jobs)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0)
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains("pushd_lane_stuck{lane=\"transactional\"} 0") })
            // The line follows the gauge.
            #expect(DaemonHarness.wait(seconds: 5) { daemon.text.contains("\"event\":\"lane_recovered\"") }, "\(daemon.text)")
            for line in daemon.text.split(separator: "\n") where ["lane_stuck", "lane_recovered", "queue_stats_stale"].contains(where: { line.contains("\"event\":\"\($0)\"") }) {
                print("log: \(line.prefix(700))")
            }
        }
    }

    /// `pushd status` waits out the same lock: it says so and names who holds it, instead of
    /// an error about a cancelled statement.
    @Test func statusUnderALockNamesTheLockAndItsHolder() throws {
        try IsolatedDatabase.with { database in
            let locker = try database.connect()
            defer { locker.close() }
            _ = try locker.execute(script: "BEGIN; LOCK TABLE pushd.jobs IN ACCESS EXCLUSIVE MODE")
            let pid = locker.backendPID
            let started = Timestamp()
            let status = try NotValidCampaignDaemonTests.command(["status"], database)
            let took = Timestamp().timeIntervalSince(started)
            _ = try locker.execute(script: "COMMIT")
            print("pushd status under the lock, \(took.fixed(1)) s, exit \(status.status): \(status.output)")
            #expect(status.status != 0)
            #expect(status.output.contains("locked by another session"), "\(status.output)")
            #expect(status.output.contains("pid \(pid)") && status.output.contains("AccessExclusiveLock on pushd.jobs"), "\(status.output)")
        }
    }

    /// The sibling: a lock on `pushd.campaigns` stops the campaign lane, which `/readyz` names;
    /// the campaign is finished after it.
    @Test func aLockOnTheCampaignsTableMakesTheCampaignLaneNotReady() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(),
                                                             log: harness.directory + "/pushd-campaign-lock.log")
            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("database reachable") }, "\(daemon.readyz())\n\(daemon.text)")
            let connection = try database.connect()
            let count = 60
            let id = try CampaignLaneTests.campaign(connection, count: count, rate: 10)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1 }, "\(daemon.text)")
            let locker = try database.connect()
            _ = try locker.execute(script: "BEGIN; LOCK TABLE pushd.campaigns IN ACCESS EXCLUSIVE MODE")
            let lockedAt = Timestamp()
            var readyz = ""
            var slowest = 0.0
            let named = DaemonHarness.wait(seconds: 18) {
                let scrape = Self.timedGet(daemon, "/metrics")
                slowest = max(slowest, scrape.seconds)
                readyz = daemon.readyz()
                return readyz.contains("campaign lane")
            }
            let after = Timestamp().timeIntervalSince(lockedAt)
            while Timestamp().timeIntervalSince(lockedAt) < 18 {
                slowest = max(slowest, Self.timedGet(daemon, "/metrics").seconds)
                PosixThread.sleep(seconds: 0.5)
            }
            _ = try locker.execute(script: "COMMIT")
            print("campaigns locked: /readyz \(named ? "named the lane" : "did not name the lane") after \(after.fixed(1)) s: \(readyz); slowest scrape \(slowest.fixed(1)) s")
            #expect(named, "/readyz during the lock on pushd.campaigns: \(readyz)")
            #expect(slowest < 3, "slowest scrape during the lock: \(slowest.fixed(1)) s")
            #expect(DaemonHarness.wait(seconds: 40) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaigns WHERE id = \(id) AND status = 'done'")) == 1
            }, "\(daemon.text.suffix(4000))")
            #expect(harness.mock.stats.accepted >= count)
            #expect(DaemonHarness.wait(seconds: 15) { daemon.readyz().contains("database reachable") })
            print("campaign of \(count) targets: APNs accepted \(harness.mock.stats.accepted)")
        }
    }
}
