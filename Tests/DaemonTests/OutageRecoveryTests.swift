import APNsMock
import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs answering every notification with 500 for 30 s, then answering again: what waited the
/// outage out (its backoff grows with it, to 15 s here) goes out as soon as the real
/// `pushd run` sees the lane back, not after the rest of its wait.
@Suite(.serialized) struct OutageRecoveryTests {
    /// The real `pushd run` with the default backoff cap (300 s, what production waits; the
    /// harness caps it at 200 ms), and its log file.
    static func startPushd(_ harness: DaemonHarness) throws -> (ChildProcess, String) {
        // The probe at its shortest (500 ms): with the default 2 s, a probe up to 2.5 s after the
        // fault ends, a second one and 1 s of answers left little room in the bounds below on
        // a loaded machine.
        let config = try APNsStormTests.configFile(harness, baseMilliseconds: 10, maxMilliseconds: 300_000,
                                                   extra: "  outage_probe_ms: 500\n")
        let log = harness.directory + "/pushd.log"
        return (try DaemonProcessTests.start(config: config, log: log), log)
    }

    @Test func jobsThatWaitedOutAnOutageAreSentWhenTheLaneIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let (process, log) = try Self.startPushd(harness)
            defer { FleetStatusTests.stop(process) }

            try harness.mock.setFaults(FaultConfiguration(internalServerErrorRate: 1))
            func insert(_ count: Int, from first: Int) throws {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(810000 + $1::int + g), 64, '0'), '{"aps":{"alert":"outage"}}'
                    FROM generate_series(0, $2::int - 1) g
                    """, [first, count])
            }
            try insert(100, from: 0)
            var inserted = 100
            let faultStarted = Timestamp()
            var errors: [String] = []
            while Timestamp().timeIntervalSince(faultStarted) < 30 {
                try insert(1, from: inserted)
                inserted += 1
                Thread.sleep(forTimeInterval: 0.5)
                if errors.isEmpty {
                    errors = try connection.query("SELECT DISTINCT last_error FROM pushd.jobs WHERE last_error IS NOT NULL")
                        .rows.map { try $0.require(0) as String }
                }
            }
            // A 5xx's status leads the job's error, which is how the jobs to send again are found.
            #expect(errors == ["HTTP 500 InternalServerError"], "\(errors)")
            let waiting = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE run_at > now() + interval '3 seconds'")
            #expect(waiting > 10, "only \(waiting) jobs wait more than 3 s at the end of the outage")

            try harness.mock.setFaults(.none)
            let recovered = Timestamp()
            // A job inserted now and then gives the lane answers to prove itself with (1 s).
            var emptied: Double?
            while Timestamp().timeIntervalSince(recovered) < 20 {
                if try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 {
                    emptied = Timestamp().timeIntervalSince(recovered)
                    break
                }
                try insert(1, from: inserted)
                inserted += 1
                Thread.sleep(forTimeInterval: 0.25)
            }
            // The line follows the statement that made them due: another worker may send them first.
            let dueLines = { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.contains("\"event\":\"outage_retries_due\"") } }
            _ = DaemonHarness.wait(seconds: 5) { !dueLines().isEmpty }
            let due = dueLines()
            print("\(waiting) jobs waited more than 3 s when the outage ended; queue empty after \(emptied.map { String(format: "%.2f s", $0) } ?? "more than 20 s"); \(due)")
            #expect(emptied != nil && emptied! < 5, "the jobs that waited out the outage took \(emptied ?? -1) s to go once APNs answered")
            #expect(due.count == 1 && due.first?.contains("\"app\":\"shop\"") == true, "\(due)")
            #expect(harness.mock.stats.accepted == inserted, "the mock accepted \(harness.mock.stats.accepted) of \(inserted)")
        }
    }

    @Test func campaignTargetsParkedDuringAnOutageAreSentWhenTheLaneIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(internalServerErrorRate: 1))
            let connection = try database.connect()
            let targets = 300
            let id = try CampaignLaneTests.campaign(connection, count: targets)
            let (process, log) = try Self.startPushd(harness)
            defer { FleetStatusTests.stop(process) }
            let parkedSQL = "SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id)"
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, parkedSQL) == targets },
                    "the campaign's targets were not parked for their retry")
            Thread.sleep(forTimeInterval: 30)
            let errors = try connection.query("SELECT DISTINCT last_error FROM pushd.campaign_retries").rows.map { try $0.require(0) as String }
            #expect(errors == ["HTTP 500 InternalServerError"], "\(errors)")
            let waiting = try DaemonHarness.count(connection, parkedSQL + " AND due_at > now() + interval '3 seconds'")
            #expect(waiting > 10, "only \(waiting) targets wait more than 3 s at the end of the outage")

            try harness.mock.setFaults(.none)
            let recovered = Timestamp()
            let store = CampaignStore()
            let done = try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done }
            let seconds = Timestamp().timeIntervalSince(recovered)
            // The line follows the statement that made them due: another worker may send them first.
            let dueLines = { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.contains("\"event\":\"outage_retries_due\"") } }
            _ = DaemonHarness.wait(seconds: 5) { !dueLines().isEmpty }
            let due = dueLines()
            print("\(waiting) parked targets waited more than 3 s when the outage ended; campaign done after \(String(format: "%.2f", seconds)) s; \(due)")
            #expect(done && seconds < 6, "the targets that waited out the outage took \(seconds) s to go once APNs answered")
            #expect(due.count == 1 && due.first?.contains("\"lane\":\"campaign\"") == true, "\(due)")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == targets && campaign.failed == 0, "\(campaign.failedByReason)")
        }
    }

    /// Broadcasts and channel requests: the outage is logged for their lanes too, and what
    /// waited it out goes when the lane is back.
    @Test func broadcastsThatWaitedOutAnOutageAreSentWhenTheLaneIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let (process, log) = try Self.startPushd(harness)
            defer { FleetStatusTests.stop(process) }
            let row = try connection.query("SELECT pushd.create_channel('shop', 'none')").require(Int64.self, row: 0, column: 0)
            var channel: String?
            #expect(DaemonHarness.wait(seconds: 20) {
                channel = try? connection.query("SELECT channel_id FROM pushd.channels WHERE id = $1 AND state = 'active'", [row])
                    .require(String.self, row: 0, column: 0)
                return channel != nil
            })
            let channelID = try #require(channel)

            try harness.mock.setFaults(FaultConfiguration(internalServerErrorRate: 1))
            let requests = 10
            for _ in 0..<requests { try connection.query("SELECT pushd.create_channel('shop', 'none')") }
            let broadcasts = 30
            for _ in 0..<broadcasts {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                     [channelID, BroadcastDaemonTests.update])
            }
            let lines = { (event: String, lane: String) in
                ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
                    .filter { $0.contains("\"event\":\"\(event)\"") && $0.contains("\"lane\":\"\(lane)\"") }
            }
            #expect(DaemonHarness.wait(seconds: 10) { !lines("apns_down", "broadcast").isEmpty }, "no apns_down line for the broadcast lane")
            #expect(DaemonHarness.wait(seconds: 10) { !lines("apns_down", "channels").isEmpty }, "no apns_down line for the channels lane")
            Thread.sleep(forTimeInterval: 20)
            let waiting = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.broadcast_jobs WHERE run_at > now() + interval '3 seconds'")
            #expect(waiting > 5, "only \(waiting) broadcasts wait more than 3 s at the end of the outage")

            try harness.mock.setFaults(.none)
            let recovered = Timestamp()
            let sent = DaemonHarness.wait(seconds: 30) { harness.mock.stats.broadcastsAccepted[channelID] == broadcasts }
            let seconds = Timestamp().timeIntervalSince(recovered)
            let created = DaemonHarness.wait(seconds: 10) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active'")) == requests + 1
            }
            let createdSeconds = Timestamp().timeIntervalSince(recovered)
            print("\(waiting) broadcasts waited more than 3 s when the outage ended; all sent after \(String(format: "%.2f", seconds)) s, the channels created after \(String(format: "%.2f", createdSeconds)) s; \(lines("outage_retries_due", "broadcast")) \(lines("outage_retries_due", "channels"))")
            #expect(sent && seconds < 6, "the broadcasts that waited out the outage took \(seconds) s to go once APNs answered")
            #expect(created && createdSeconds < 6, "the channel requests that waited out the outage took \(createdSeconds) s to go once APNs answered")
            // The lanes' lines are written one after the other once the lanes are back.
            #expect(DaemonHarness.wait(seconds: 5) { lines("apns_back", "channels").count == 1 && lines("apns_back", "broadcast").count == 1
                && lines("outage_retries_due", "broadcast").count == 1 && lines("outage_retries_due", "channels").count == 1 })
            #expect(lines("apns_back", "broadcast").count == 1 && lines("outage_retries_due", "broadcast").count == 1)
            #expect(lines("apns_back", "channels").count == 1 && lines("outage_retries_due", "channels").count == 1)
        }
    }

    /// One transactional job and one channel creation wait through an outage, and at its end
    /// each has a minute of backoff left, as after a 2-minute outage (a backoff is up to half
    /// the time waited): nothing else is sent on their lanes, so only a probe can show that
    /// APNs is back. Both go within seconds of the fault's end, and both lanes are back.
    @Test func aLoneWaitingJobAndChannelRequestGoWithinSecondsOfTheOutageEnd() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let (process, log) = try Self.startPushd(harness)
            defer { FleetStatusTests.stop(process) }
            let lines = { (event: String, lane: String) in
                ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
                    .filter { $0.contains("\"event\":\"\(event)\"") && $0.contains("\"lane\":\"\(lane)\"") }
            }
            var port: Int?
            #expect(DaemonHarness.wait(seconds: 20) { port = PrometheusScrapeTests.metricsPort(log: log); return port != nil })
            let metricsPort = String(try #require(port))

            try harness.mock.setFaults(FaultConfiguration(internalServerErrorRate: 1))
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                VALUES ('shop', lpad(to_hex(820000), 64, '0'), '{"aps":{"alert":"login code 314159"}}')
                """)
            try connection.query("SELECT pushd.create_channel('shop', 'none')")
            #expect(DaemonHarness.wait(seconds: 30) { !lines("apns_down", "transactional").isEmpty }, "no apns_down line for the transactional lane")
            #expect(DaemonHarness.wait(seconds: 30) { !lines("apns_down", "channels").isEmpty }, "no apns_down line for the channels lane")

            // A minute of backoff left for each, set while neither is being sent (a claimed job is
            // out of the table, a claimed request is leased).
            let later = DaemonHarness.wait(seconds: 20) {
                _ = try? connection.query("UPDATE pushd.jobs SET run_at = now() + interval '60 seconds'")
                _ = try? connection.query("""
                    UPDATE pushd.channels SET run_at = now() + interval '60 seconds'
                    WHERE state = 'pending_create' AND (leased_until IS NULL OR leased_until <= now())
                    """)
                let jobs = try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE run_at > now() + interval '50 seconds'")
                let requests = try? DaemonHarness.count(connection, """
                    SELECT count(*) FROM pushd.channels WHERE state = 'pending_create' AND run_at > now() + interval '50 seconds'
                      AND (leased_until IS NULL OR leased_until <= now()) AND outcome ^@ 'HTTP 5'
                    """)
                return jobs == 1 && requests == 1
            }
            #expect(later, "the job and the channel request were not both waiting for a retry")
            try harness.mock.setFaults(.none)
            let recovered = Timestamp()

            let sent = DaemonHarness.wait(seconds: 30) { (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs")) == 0 }
            let sentSeconds = Timestamp().timeIntervalSince(recovered)
            let created = DaemonHarness.wait(seconds: 30) {
                (try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.channels WHERE state = 'active'")) == 1
            }
            let createdSeconds = Timestamp().timeIntervalSince(recovered)
            let back = DaemonHarness.wait(seconds: 10) { !lines("apns_back", "transactional").isEmpty && !lines("apns_back", "channels").isEmpty }
            let backSeconds = Timestamp().timeIntervalSince(recovered)
            let metrics = (try? SecretRedactionTests.http(metricsPort, "/metrics")) ?? ""
            let probeSeries = metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_apns_outage_probes_total{") }
            print("after the outage the job was sent after \(String(format: "%.2f", sentSeconds)) s, the channel created after \(String(format: "%.2f", createdSeconds)) s, both lanes back after \(String(format: "%.2f", backSeconds)) s; \(lines("outage_probe", "transactional").count) + \(lines("outage_probe", "channels").count) probe lines; \(probeSeries)")
            #expect(sent && sentSeconds < 9, "the waiting job took \(sentSeconds) s to go once APNs answered")
            #expect(created && createdSeconds < 9, "the waiting channel request took \(createdSeconds) s to go once APNs answered")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(back, "the lanes were not back: \(lines("apns_back", "transactional")) \(lines("apns_back", "channels"))")
            #expect(probeSeries.contains { $0.hasPrefix("pushd_apns_outage_probes_total{environment=\"sandbox\",lane=\"channels\"}") && !$0.hasSuffix(" 0") },
                    "\(probeSeries)")
            #expect(probeSeries.contains { $0.hasPrefix("pushd_apns_outage_probes_total{environment=\"sandbox\",lane=\"transactional\"}") && !$0.hasSuffix(" 0") },
                    "\(probeSeries)")
            #expect(probeSeries.contains("pushd_apns_outage_probes_total{environment=\"sandbox\",lane=\"campaign\"} 0"), "no waiting target, no probe: \(probeSeries)")
            for lane in ["transactional", "channels"] {
                let probes = lines("outage_probe", lane)
                // At most one probe per interval and lane: consecutive lines at least the interval
                // less its spread apart (500 ms less 25 %; a lane answering again probes every
                // second), whatever the machine's load made of the number of intervals.
                let times = probes.compactMap { line -> Timestamp? in
                    guard let start = line.range(of: "\"time\":\"")?.upperBound,
                          let end = line[start...].firstIndex(of: "\"") else { return nil }
                    return Timestamp(iso8601: String(line[start..<end]))
                }
                let gaps = zip(times.dropFirst(), times).map { $0.timeIntervalSince($1) }
                #expect(!probes.isEmpty && times.count == probes.count, "\(probes.count) probe lines for the \(lane) lane, \(times.count) with a time")
                #expect(gaps.allSatisfy { $0 >= 0.375 - 0.002 }, "probe lines for the \(lane) lane closer than an interval: \(gaps) s apart")
            }
        }
    }
}
