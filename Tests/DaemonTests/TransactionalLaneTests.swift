import APNs
import Locking
import Posix
@testable import APNsMock
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

@Suite(.serialized) struct TransactionalLaneTests {
    @Test func anInsertIsDeliveredExactlyOnceWithItsHeadersAndPayloadBytes() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            let connection = try database.connect()
            let token = DaemonHarness.token(1)
            // Spaces and key order as the application wrote them: APNs must get these exact bytes.
            let payload = #"{"aps":{"alert":{"title":"Shipped","body":"Order 1042 is on its way"},"sound":"default"}, "order": 1042}"#
            let apnsID = APNsID()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, priority, collapse_id, apns_id, expiration)
                VALUES ('shop', $1, $2, 5, 'order-1042', $3, now() + interval '1 hour')
                """, [token.uppercased(), payload, apnsID])

            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.acceptedLog.count == 1 })
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 0.3)
            let accepted = harness.mock.acceptedLog
            #expect(accepted.count == 1)
            let entry = try #require(accepted.first)
            #expect(entry.token == token)
            #expect(entry.topic == DaemonHarness.bundleID)
            #expect(entry.apnsID == apnsID.lowercasedString)
            #expect(entry.payloadSHA256 == PayloadDigest.sha256Hex(Array(payload.utf8)))
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(pipeline.context.tally.sent.load(ordering: .relaxed) == 1)
        }
    }

    @Test func oneScrapeReadsTheQueueOnceForAllItsGaugesAndReadinessDoesNotScanIt() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            // Not started: the jobs stay queued while the metrics are read.
            let pipeline = try harness.pipeline()
            let connection = try database.connect()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}',
                       CASE WHEN g <= 100 THEN now() - interval '30 seconds' ELSE now() + interval '1 hour' END
                FROM generate_series(1, 105) g
                """)
            let text = pipeline.context.metrics.registry.expositionText()
            #expect(text.contains("pushd_queue_depth{lane=\"transactional\"} 100\n"),
                    "\(text.split(separator: "\n").filter { $0.contains("queue") })")
            let age = text.split(separator: "\n").first { $0.hasPrefix("pushd_queue_oldest_age_seconds{lane=\"transactional\"}") }
            #expect((age.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0) >= 29)
            #expect(pipeline.statsReads.load(ordering: .relaxed) == 1)
            _ = pipeline.context.metrics.registry.expositionText()
            try pipeline.checkDatabase()
            #expect(pipeline.statsReads.load(ordering: .relaxed) == 1)
        }
    }

    @Test func rejectedJobsAreDeadLetteredWithReasonsAndTokensPruned() throws {
        let unregistered = DaemonHarness.token(2)
        let bad = DaemonHarness.token(3)
        // APNs learned of the token's end after its registration, so the prune applies.
        let learned = Int64(Timestamp().timeIntervalSince1970 * 1000) + 60_000
        let faults = FaultConfiguration(unregisteredTokens: [unregistered: learned], badDeviceTokens: [bad])
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: faults)
            let connection = try database.connect()
            let tokens = TokenStore()
            try tokens.register(connection, app: "shop", token: unregistered, environment: "sandbox")
            try tokens.register(connection, app: "shop", token: bad, environment: "sandbox")
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            // The INSERT checks compare numbers by value, so a flag written 1.0 passes them; the
            // sender reads the number's text and refuses it, as APNs documents 0 or 1.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type, priority) VALUES
                  ('shop', $1, '{"aps":{"alert":"a"}}', 'alert', 10),
                  ('shop', $2, '{"aps":{"alert":"b"}}', 'alert', 10),
                  ('shop', $3, '{"aps":{"alert":"c","mutable-content":1.0}}', 'alert', 10),
                  ('ghost', $3, '{"aps":{"alert":"d"}}', 'alert', 10)
                """, [unregistered, bad, DaemonHarness.token(4)])

            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 3 })
            let rows = try connection.query("SELECT device_token, app, status, reason FROM pushd.dead_jobs ORDER BY app, device_token").rows
            let reasons = try rows.map { "\(try $0.require(1, as: String.self)) \(try $0.get(2, as: Int.self).map(String.init) ?? "-") \(try $0.require(3, as: String.self))" }
            #expect(reasons.contains("shop 410 Unregistered"))
            #expect(reasons.contains("shop 400 BadDeviceToken"))
            #expect(reasons.contains { $0.hasPrefix("shop - Invalid: ") && $0.contains("mutable-content") }, "\(reasons)")
            // No instance is configured for "ghost": its job waits, untouched, rather than being dead-lettered.
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE app = 'ghost' AND attempts = 0") == 1)
            let pruned = try connection.query("SELECT token, invalid_reason FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL ORDER BY token").rows
            #expect(try pruned.map { try $0.require(1, as: String.self) }.sorted() == ["BadDeviceToken", "Unregistered"])
            #expect(harness.mock.acceptedLog.isEmpty)
        }
    }

    /// A row whose timestamp PostgreSQL takes and pushd cannot read (queued before the CHECKs of
    /// schema version 31 refused it) made every claim that took it fail and roll back, on every
    /// turn: the jobs behind it were never sent. The claim dead-letters it and goes on.
    @Test func aJobWhoseTimeCannotBeReadIsDeadLetteredAndTheRestAreSent() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            try connection.execute(script: """
                ALTER TABLE pushd.jobs DROP CONSTRAINT jobs_expiration_readable;
                INSERT INTO pushd.jobs (app, device_token, payload, expiration, run_at)
                VALUES ('shop', '\(DaemonHarness.token(1))', '{"aps":{"alert":"never expires"}}', 'infinity', now() - interval '1 minute');
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g + 16), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, 5) g;
                """)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.acceptedLog.count == 5 })
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            let dead = try connection.query("SELECT app, device_token, expiration IS NULL, status IS NULL, reason FROM pushd.dead_jobs").rows
            #expect(dead.count == 1)
            if let row = dead.first {
                #expect(try row.require(1, as: String.self) == DaemonHarness.token(1))
                #expect(try row.require(2, as: Bool.self))
                #expect(try row.require(3, as: Bool.self))
                let reason = try row.require(4, as: String.self)
                #expect(reason.contains("expiration") && reason.contains("infinity"), "\(reason)")
            }
            #expect(pipeline.context.metrics.deadLetter(app: "shop", lane: "transactional", reason: "unreadable").value == 1)
            #expect(!harness.mock.acceptedLog.contains { $0.token == DaemonHarness.token(1) })
        }
    }

    /// A 410 whose timestamp is no time (a year beyond what PostgreSQL takes) failed the prune,
    /// and with it the batch: its other, accepted jobs were sent again on every turn.
    @Test func aGarbledFourTenTimestampNeitherFailsTheBatchNorSendsItsOtherJobsAgain() throws {
        let unregistered = DaemonHarness.token(2)
        let faults = FaultConfiguration(unregisteredTokens: [unregistered: 9_000_000_000_000_000_000])
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: faults)
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) VALUES
                  ('shop', $1, '{"aps":{"alert":"a"}}'), ('shop', $2, '{"aps":{"alert":"b"}}')
                """, [DaemonHarness.token(1), unregistered])
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 1 })
            Thread.sleep(forTimeInterval: 3)
            #expect(harness.mock.acceptedLog.count == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalid_reason = 'Unregistered'") == 1)
        }
    }

    /// A worker backing off after database errors (up to 30 s) held shutdown until its sleep
    /// ended, though it held no batch.
    @Test func aWorkersBackOffAfterDatabaseErrorsEndsWhenThePipelineStops() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let pipeline = try harness.pipeline()
            let context = pipeline.context
            let woke = Semaphore()
            let started = Timestamp()
            Thread.detachNewThread {
                context.sleepAfterDatabaseFailure(8)
                woke.signal()
            }
            Thread.sleep(forTimeInterval: 0.3)
            #expect(!woke.wait(timeout: 0))
            context.stopping.store(true, ordering: .relaxed)
            #expect(woke.wait(timeout: 5))
            #expect(Timestamp().timeIntervalSince(started) < 5)
        }
    }

    @Test func goawayAndServiceUnavailableCauseRetriesWithoutLoss() throws {
        let faults = FaultConfiguration(serviceUnavailableRate: 0.05, goawayAfterStreams: 150)
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: faults)
            let connection = try database.connect()
            let count = 3000
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 16, '0') || lpad(to_hex(g), 16, '0') || lpad(to_hex(g), 16, '0') || lpad(to_hex(g), 16, '0'),
                       '{"aps":{"alert":"n ' || g || '"}}'
                FROM generate_series(1, $1) g
                """, [count])
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            #expect(try DaemonHarness.wait(seconds: 90) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let stats = harness.mock.stats
            #expect((stats.rejected["503 ServiceUnavailable"] ?? stats.rejected.filter { $0.key.contains("ServiceUnavailable") }.values.reduce(0, +)) > 0,
                    "\(stats.rejected)")
            #expect(!stats.goaways.isEmpty)
            let acceptedTokens = Set(harness.mock.acceptedLog.map(\.token))
            #expect(acceptedTokens.count == count)
            // Nothing is sent twice without a crash: a refused or 503 stream was not accepted.
            #expect(harness.mock.acceptedLog.count == count)
            #expect(pipeline.context.tally.retried.load(ordering: .relaxed) > 0)
            // The metrics say what happened to the connections: ended by GOAWAY (judged a quarter
            // second after the engine moved requests off the connection), and replaced.
            let goaway = "pushd_apns_connection_errors_total{app=\"shop\",environment=\"sandbox\",reason=\"goaway\"}"
            func value(_ prefix: String) -> Double {
                pipeline.context.metrics.registry.expositionText().split(separator: "\n").first { $0.hasPrefix(prefix) }
                    .flatMap { Double($0.split(separator: " ").last ?? "") } ?? -1
            }
            #expect(DaemonHarness.wait(seconds: 5) { value(goaway) >= 1 },
                    "\(pipeline.context.metrics.registry.expositionText().split(separator: "\n").filter { $0.contains("connection") })")
            #expect(value("pushd_apns_reconnects_total{app=\"shop\",environment=\"sandbox\"}") >= 1)
            #expect(value("pushd_apns_connection_errors_total{app=\"shop\",environment=\"sandbox\",reason=\"tls\"}") == 0)
        }
    }

    @Test func anAPNsOutageStallsSendingWithoutDeadLettersAndDeliveryResumesWhenItIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"before\"}}')",
                                 [DaemonHarness.token(1)])
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 1 })

            harness.mock.stop()
            let count = 300
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(1000 + g), 64, '0'), '{"aps":{"alert":"during"}}' FROM generate_series(1, $1) g
                """, [count])
            // Retry delays of 10-200 ms would spend the budget of 8 attempts in about a second;
            // sends that got no answer must not count against it.
            Thread.sleep(forTimeInterval: 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == count)
            #expect(try DaemonHarness.count(connection, "SELECT coalesce(max(attempts), 0) FROM pushd.jobs") == 0)
            let errors = try connection.query("SELECT DISTINCT coalesce(last_error, 'none') FROM pushd.jobs").rows.map { try $0.require(0) as String }
            // Sent into a dead connection (no answer), or handed back unsent once connections kept failing.
            #expect(errors.contains { $0.hasPrefix("transport: ") || $0.hasPrefix("not sent: ") }, "\(errors) \(pipeline.context.senders["shop"]!.transactionalDispatcher.statistics) outstanding \(pipeline.context.senders["shop"]!.transactionalDispatcher.outstanding) tally retried \(pipeline.context.tally.retried.load(ordering: .relaxed))")

            try harness.restartMock()
            #expect(try DaemonHarness.wait(seconds: 60) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == count)
        }
    }

    @Test func lostDatabaseConnectionsStallSendingAndItResumesByItself() throws {
        try IsolatedDatabase.with { database in
            // Every answer takes 100 ms and batches are small, so the workers are mid-batch
            // (inside a transaction) for most of the run.
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 100))
            let connection = try database.connect()
            var config = harness.config()
            config.batchSize = 50
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            func insert(from first: Int, count: Int) throws {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series($1::int, $2::int) g
                    """, [first, first + count - 1])
            }
            try insert(from: 1, count: 2000)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 100 })
            // What a database restart does to pushd: every one of its sessions is cut, some in
            // the middle of a batch's transaction, others asleep on LISTEN.
            let cut = try connection.query("""
                SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend') t
                """).require(Int.self, row: 0, column: 0)
            #expect(cut >= 2)
            #expect(harness.mock.stats.accepted < 2000)
            try insert(from: 10_001, count: 500)
            #expect(try DaemonHarness.wait(seconds: 60) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            // At least once: a batch cut before its COMMIT is sent again, nothing is missing.
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == 2500)
            // And a job inserted now is picked up at once: the workers listen again.
            try insert(from: 20_001, count: 1)
            let inserted = Timestamp()
            let lastToken = String(repeating: "0", count: 60) + String(20_001, radix: 16)
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.acceptedLog.contains { $0.token == lastToken } })
            #expect(Timestamp().timeIntervalSince(inserted) < 3)
        }
    }

    @Test func twoPipelinesOnOneDatabaseNeverSendAJobTwice() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let first = try harness.pipeline(instance: "one")
            let second = try harness.pipeline(instance: "two")
            first.start()
            second.start()
            defer {
                first.stop(deadline: Timestamp().addingTimeInterval(5))
                second.stop(deadline: Timestamp().addingTimeInterval(5))
            }
            let count = 5000
            for batch in stride(from: 0, to: count, by: 500) {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(g), 16, '0') || lpad(to_hex(g), 16, '0') || lpad(to_hex(g), 16, '0') || lpad(to_hex(g), 16, '0'),
                           '{"aps":{"alert":"x"}}'
                    FROM generate_series($1::int, $1::int + 499) g
                    """, [batch])
            }
            #expect(try DaemonHarness.wait(seconds: 60) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 0.3)
            let log = harness.mock.acceptedLog
            let repeated = Dictionary(grouping: log, by: \.token).filter { $0.value.count > 1 }
            #expect(log.count == count, "sent twice: \(repeated.values.prefix(3).map { $0.map { "\($0.token.prefix(8)) conn \($0.connectionID) stream \($0.streamID)" } }) mock \(harness.mock.metricsText.split(separator: "\n").filter { !$0.hasPrefix("#") }.joined(separator: "; ")) dispatchers \(first.context.senders["shop"]!.transactionalDispatcher.statistics) \(second.context.senders["shop"]!.transactionalDispatcher.statistics)")
            #expect(Set(log.map(\.token)).count == count)
            #expect(first.context.tally.sent.load(ordering: .relaxed) > 0)
            #expect(second.context.tally.sent.load(ordering: .relaxed) > 0)
        }
    }

    /// A worker that had work recently polls; a NOTIFY sent because another claimer sleeps
    /// (here a registration standing for another instance's idle worker) ends its wait at
    /// once. The poll interval is made 10 s so that waiting it out cannot pass for the NOTIFY.
    @Test func aPollingWorkerTakesAJobWhenItsNotifyArrivesNotAtTheEndOfItsPollInterval() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            var config = harness.config()
            config.transactionalWorkers = 1
            config.jobWait = JobWaitPolicy(pollInterval: 10, busyWindow: 600, sleepTimeout: 1)
            let sleeper = try database.connect()
            try sleeper.query("INSERT INTO pushd.job_waiters (pid) VALUES (pg_backend_pid())")
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            let connection = try database.connect()
            let insert = "INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"x\"}}')"
            try connection.query(insert, [DaemonHarness.token(1)])
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.acceptedLog.count == 1 })
            // The worker has settled the first job and is in its poll interval.
            Thread.sleep(forTimeInterval: 1.5)
            let inserted = Timestamp()
            try connection.query(insert, [DaemonHarness.token(2)])
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.acceptedLog.count == 2 })
            let waited = Timestamp().timeIntervalSince(inserted)
            #expect(waited < 4, "the second job was sent \(waited) s after its INSERT")
        }
    }
}
