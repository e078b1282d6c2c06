import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Locking
import Testing

@Suite struct JobQueueTests {
    let queue = JobQueue()
    /// Every app these tests insert jobs for: the claim takes only the apps it is given.
    let apps = ["shop", "blog"]

    func insertJobs(_ connection: PGConnection, count: Int, app: String = "shop", priority: Int? = nil,
                    runAtOffset: Int = 0) throws {
        try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, payload, priority, run_at)
            SELECT $1, lpad(to_hex(g), 64, '0'), $2, $3, now() + make_interval(secs => $4)
            FROM generate_series(1, $5) g
            """, [app, Fixtures.payload, priority, runAtOffset, count])
    }

    @Test func applicationInsertGetsDefaultsAndALowerCaseToken() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                                 [Fixtures.token(0xABC).uppercased(), Fixtures.payload])
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type) VALUES ('shop', $1, '{"aps":{"content-available":1}}', 'background')
                """, [Fixtures.token(2)])
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            let alert = try #require(batch.jobs.first { $0.pushType == "alert" })
            #expect(alert.deviceToken == Fixtures.token(0xABC))
            #expect(alert.payload == Fixtures.payload)
            #expect(alert.priority == 10)
            #expect(alert.attempts == 0)
            let background = try #require(batch.jobs.first { $0.pushType == "background" })
            #expect(background.priority == 5)
        }
    }

    @Test func badRowsAreRejectedAtInsertWithMessagesSayingWhatIsWrong() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let good = Fixtures.token(1)
            let cases: [(String, [any PGParameter], String, String)] = [
                ("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                 [String(good.dropLast(2)) + "zz", Fixtures.payload], "jobs_device_token_hex",
                 "pushd.jobs.device_token must be hexadecimal, found 'z' at position 63"),
                ("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                 [String(good.prefix(62)), Fixtures.payload], "jobs_device_token_hex",
                 "pushd.jobs.device_token must be an even number of hexadecimal digits from 64 to 200, got 62"),
                ("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                 [good, "[1,2]"], "jobs_payload_json_object", "pushd.jobs.payload must be a JSON object, got a JSON array"),
                ("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                 [good, "{\"aps\":"], "jobs_payload_json_object", "pushd.jobs.payload must be a JSON object but is not valid JSON"),
                ("INSERT INTO pushd.jobs (app, device_token, payload, push_type) VALUES ('shop', $1, $2, 'banner')",
                 [good, Fixtures.payload], "jobs_push_type_known", "pushd.jobs.push_type must be one of alert, background"),
                ("INSERT INTO pushd.jobs (app, device_token, payload, priority) VALUES ('shop', $1, $2, 7)",
                 [good, Fixtures.payload], "jobs_priority_valid", "pushd.jobs.priority must be 10, 5 or 1, got 7"),
                ("INSERT INTO pushd.jobs (app, device_token, payload, collapse_id) VALUES ('shop', $1, $2, repeat('x', 65))",
                 [good, Fixtures.payload], "jobs_collapse_id_length", "pushd.jobs.collapse_id must be at most 64 bytes, got 65"),
                // apns-collapse-id is a header value: CR or LF would split the header line.
                ("INSERT INTO pushd.jobs (app, device_token, payload, collapse_id) VALUES ('shop', $1, $2, E'score\\nupdate')",
                 [good, Fixtures.payload], "jobs_collapse_id_printable",
                 "pushd.jobs.collapse_id must not contain control characters (APNs refuses them), found U+000A at position 6"),
                // apns-expiration is epoch seconds, 0 or more.
                ("INSERT INTO pushd.jobs (app, device_token, payload, expiration) VALUES ('shop', $1, $2, '1969-12-31 23:59:59+00')",
                 [good, Fixtures.payload], "jobs_expiration_valid",
                 "pushd.jobs.expiration must not be before 1970-01-01 00:00:00 UTC (APNs takes epoch seconds, 0 or more)"),
                ("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('', $1, $2)",
                 [good, Fixtures.payload], "jobs_app_valid", "pushd.jobs.app must be 1 to 64 lower-case letters"),
            ]
            for (sql, parameters, constraint, message) in cases {
                let error = Fixtures.pgError { try connection.query(sql, parameters) }
                #expect(error?.code == .checkViolation, "\(message)")
                #expect(error?.constraint == constraint)
                #expect(error?.message.hasPrefix(message) == true, "got: \(error?.message ?? "no error")")
            }
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 0)
        }
    }

    @Test func claimTakesHighestPriorityFirstThenOldestRunAtAndLeavesFutureJobs() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, priority, run_at) VALUES
                  ('shop', $1, '{}', 5, now() - interval '3 minutes'),
                  ('shop', $2, '{}', 10, now() - interval '1 minute'),
                  ('shop', $3, '{}', 10, now() - interval '2 minutes'),
                  ('shop', $4, '{}', 1, now() - interval '5 minutes'),
                  ('shop', $5, '{}', 10, now() + interval '1 hour')
                """, [Fixtures.token(1), Fixtures.token(2), Fixtures.token(3), Fixtures.token(4), Fixtures.token(5)])
            let first = try queue.claim(connection, limit: 2, apps: apps)
            #expect(first.jobs.map(\.deviceToken).sorted() == [Fixtures.token(2), Fixtures.token(3)])
            try queue.finish(connection, first, JobOutcomes(delivered: first.jobs.map(\.id)))
            let second = try queue.claim(connection, limit: 10, apps: apps)
            #expect(Set(second.jobs.map(\.deviceToken)) == [Fixtures.token(1), Fixtures.token(4)])
            try queue.finish(connection, second, JobOutcomes(delivered: second.jobs.map(\.id)))
            #expect(try queue.claim(connection, limit: 10, apps: apps).isEmpty)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 1)
        }
    }

    @Test func finishDeletesDeliveredReschedulesRetriesAndMovesFailuresToDeadJobs() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try insertJobs(connection, count: 6)
            try connection.query("UPDATE pushd.jobs SET dedupe_key = 'k' || id, collapse_id = 'c', apns_id = gen_random_uuid()")
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            #expect(batch.jobs.count == 6)
            let ids = batch.jobs.map(\.id).sorted()
            let later = Timestamp().addingTimeInterval(600)
            try queue.finish(connection, batch, JobOutcomes(
                delivered: Array(ids[0..<3]),
                retries: [JobRetry(id: ids[3], runAt: later, error: "503 ServiceUnavailable")],
                failures: [JobFailure(id: ids[4], status: 400, reason: "BadTopic"),
                           JobFailure(id: ids[5], status: nil, reason: "payload is 5000 bytes, over the 4096 limit")]))
            let retried = try connection.query("""
                SELECT id, attempts, last_error, extract(epoch FROM run_at)::float8, dedupe_key, apns_id IS NOT NULL FROM pushd.jobs
                """)
            #expect(retried.rowCount == 1)
            #expect(try retried.require(Int64.self, row: 0, column: 0) == ids[3])
            #expect(try retried.require(Int.self, row: 0, column: 1) == 1)
            #expect(try retried.require(String.self, row: 0, column: 2) == "503 ServiceUnavailable")
            #expect(abs(try retried.require(Double.self, row: 0, column: 3) - later.timeIntervalSince1970) < 0.001)
            #expect(try retried.require(String.self, row: 0, column: 4) == "k\(ids[3])")
            #expect(try retried.require(Bool.self, row: 0, column: 5))
            let dead = try connection.query("""
                SELECT id, status, reason, payload, device_token, attempts, failed_at <= now() FROM pushd.dead_jobs ORDER BY id
                """)
            #expect(dead.rowCount == 2)
            #expect(try dead.require(Int64.self, row: 0, column: 0) == ids[4])
            #expect(try dead.get(Int.self, row: 0, column: 1) == 400)
            #expect(try dead.require(String.self, row: 0, column: 2) == "BadTopic")
            #expect(try dead.require(String.self, row: 0, column: 3) == Fixtures.payload)
            #expect(try dead.get(Int.self, row: 1, column: 1) == nil)
            #expect(try dead.require(Int.self, row: 1, column: 5) == 1)
        }
    }

    /// Migration 12 added jobs_background_priority NOT VALID, which exempts rows queued before
    /// it until they are written again; a retry writes the job again (the claim deletes it and
    /// `finish` inserts it back), so the check refuses an old background push at priority 10.
    /// That must not roll the whole batch back, to be claimed and sent again on every turn: the
    /// rest of the batch is settled and the refused job goes to dead letters saying why.
    @Test func aRetryThatACheckAddedNotValidRefusesIsDeadLetteredAndTheRestOfTheBatchSettles() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            _ = try connection.execute(script: "ALTER TABLE pushd.jobs DROP CONSTRAINT jobs_background_priority")
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type, priority)
                VALUES ('shop', $1, '{"aps":{"content-available":1}}', 'background', 10)
                """, [Fixtures.token(1)])
            _ = try connection.execute(script: """
                ALTER TABLE pushd.jobs ADD CONSTRAINT jobs_background_priority CHECK (push_type <> 'background' OR priority = 5
                    OR pushd.fail_check('pushd.jobs.priority', 'jobs_background_priority',
                                        format('must be 5 for a background push (APNs refuses 10 and 1), got %s', priority))) NOT VALID
                """)
            try insertJobs(connection, count: 3)
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            #expect(batch.jobs.count == 4)
            let old = try #require(batch.jobs.first { $0.pushType == "background" })
            let others = batch.jobs.map(\.id).filter { $0 != old.id }.sorted()
            let later = Timestamp().addingTimeInterval(600)
            let refused = try queue.finish(connection, batch, JobOutcomes(
                delivered: [others[0], others[1]],
                retries: [JobRetry(id: old.id, runAt: later, error: "503 ServiceUnavailable"),
                          JobRetry(id: others[2], runAt: later, error: "503 ServiceUnavailable")]))
            #expect(refused.map(\.job.id) == [old.id], "the refused retry is reported, for the worker to count and log")
            #expect(refused.first?.check == "jobs_background_priority")
            let queued = try connection.query("SELECT id, attempts FROM pushd.jobs ORDER BY id")
            #expect(queued.rowCount == 1)
            #expect(try queued.require(Int64.self, row: 0, column: 0) == others[2])
            #expect(try queued.require(Int.self, row: 0, column: 1) == 1)
            let dead = try connection.query("SELECT id, status, reason FROM pushd.dead_jobs")
            #expect(dead.rowCount == 1)
            #expect(try dead.require(Int64.self, row: 0, column: 0) == old.id)
            #expect(try dead.get(Int.self, row: 0, column: 1) == nil)
            let reason = try dead.require(String.self, row: 0, column: 2)
            #expect(reason.contains("jobs_background_priority"), "\(reason)")
            #expect(reason.contains("pushd.jobs.priority must be 5 for a background push"), "\(reason)")
            #expect(reason.contains("503 ServiceUnavailable"), "\(reason)")
            #expect(try queue.claim(connection, limit: 10, apps: apps).isEmpty)
        }
    }

    @Test func finishWithAnOutcomeMissingRefusesAndReturnsTheWholeBatch() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try insertJobs(connection, count: 3)
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            let error = Fixtures.queueError {
                try queue.finish(connection, batch, JobOutcomes(delivered: Array(batch.jobs.map(\.id).prefix(2))))
            }
            #expect(error?.message.contains("have no outcome") == true)
            #expect(try queue.claim(connection, limit: 10, apps: apps).jobs.count == 3)
            try queue.abandon(connection)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 3)
        }
    }

    @Test func twoConcurrentClaimersNeverGetTheSameJob() throws {
        try IsolatedDatabase.with { database in
            let setup = try database.connect()
            try insertJobs(setup, count: 4000)
            let claimed = Lock<[[Int64]]>([[], []])
            let failures = Lock<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 2) { worker in
                do {
                    let connection = try database.connect()
                    while true {
                        let batch = try queue.claim(connection, limit: 50, apps: apps)
                        if batch.isEmpty { break }
                        try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
                        claimed.withLock { $0[worker].append(contentsOf: batch.jobs.map(\.id)) }
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            #expect(failures.withLock { $0 } == [])
            let (first, second) = claimed.withLock { ($0[0], $0[1]) }
            #expect(Set(first).isDisjoint(with: Set(second)))
            #expect(first.count + second.count == 4000)
            #expect(Set(first + second).count == 4000)
        }
    }

    @Test func claimerWhoseBackendIsTerminatedMidBatchLosesNothing() throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            try insertJobs(admin, count: 20)
            let doomed = try database.connect()
            let batch = try queue.claim(doomed, limit: 15, apps: apps)
            #expect(batch.jobs.count == 15)
            let survivor = try database.connect()
            let rest = try queue.claim(survivor, limit: 100, apps: apps)
            #expect(rest.jobs.count == 5)
            try queue.abandon(survivor)
            #expect(try admin.query("SELECT pg_terminate_backend($1)", [doomed.backendPID]).require(Bool.self, row: 0, column: 0))
            #expect(Fixtures.pgError { try queue.finish(doomed, batch, JobOutcomes(delivered: batch.jobs.map(\.id))) } != nil)
            var recovered = [Int64]()
            for _ in 0..<50 {
                let again = try queue.claim(survivor, limit: 100, apps: apps)
                recovered = again.jobs.map(\.id)
                try queue.abandon(survivor)
                if recovered.count == 20 { break }
                usleep(20_000)
            }
            #expect(Set(recovered).isSuperset(of: batch.jobs.map(\.id)))
            #expect(recovered.count == 20)
        }
    }

    @Test func aBatchWhoseSessionEndedIsTakenBackByIdExceptWhatAnotherClaimerHolds() throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            try insertJobs(admin, count: 10)
            let doomed = try database.connect()
            let batch = try queue.claim(doomed, limit: 10, apps: apps)
            #expect(batch.jobs.count == 10)
            #expect(try admin.query("SELECT pg_terminate_backend($1)", [doomed.backendPID]).require(Bool.self, row: 0, column: 0))
            var ended = false
            for _ in 0..<50 where !ended {
                ended = (try? doomed.checkSession()) == nil
                usleep(20_000)
            }
            #expect(ended)
            // Another claimer took three of the rolled-back jobs meanwhile and holds them.
            let other = try database.connect()
            var held = ClaimedJobs(jobs: [])
            for _ in 0..<50 {
                held = try queue.claim(other, limit: 3, apps: apps)
                if held.jobs.count == 3 { break }
                if !held.isEmpty { try queue.abandon(other) }
                usleep(20_000)
            }
            #expect(held.jobs.count == 3)
            let fresh = try database.connect()
            let taken = try queue.retake(fresh, batch)
            #expect(Set(taken.jobs.map(\.id)) == Set(batch.jobs.map(\.id)).subtracting(held.jobs.map(\.id)))
            #expect(taken.jobs.allSatisfy { $0.attempts == 0 })
            let ids = Set(taken.jobs.map(\.id))
            try queue.finish(fresh, taken, JobOutcomes(delivered: batch.jobs.map(\.id)).restricted(to: ids))
            try queue.abandon(other)
            // Only the held ones are left, to be sent by the claimer that took them.
            let left = try admin.query("SELECT id FROM pushd.jobs ORDER BY id").rows.map { try $0.require(0) as Int64 }
            #expect(left == held.jobs.map(\.id).sorted())
        }
    }

    /// A COMMIT whose reply is lost may have gone through: the retried jobs are then back in the
    /// queue under their ids, due later, written by that settle. Taken back, their retry was
    /// recorded a second time (an attempt counted twice, the error and due time written again).
    @Test func aRetakeAfterACommitThatWentThroughTakesNoRetriedJobBack() throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            try insertJobs(admin, count: 4)
            let claimer = try database.connect()
            let batch = try queue.claim(claimer, limit: 4, apps: apps)
            #expect(batch.jobs.count == 4)
            let ids = batch.jobs.map(\.id)
            let later = Timestamp().addingTimeInterval(60)
            // Committed, though the claimer would not know it had its reply been lost.
            try queue.finish(claimer, batch, JobOutcomes(delivered: Array(ids[0..<2]),
                                                         retries: ids[2...].map { JobRetry(id: $0, runAt: later, error: "InternalServerError",
                                                                                           countsAsAttempt: true, sentAt: Timestamp()) }))
            let fresh = try database.connect()
            let taken = try queue.retake(fresh, batch)
            #expect(taken.jobs.isEmpty, "taken back: \(taken.jobs.map(\.id)) of a batch whose settle was committed")
            if !taken.isEmpty { try queue.abandon(fresh) }
            let attempts = try admin.query("SELECT attempts FROM pushd.jobs ORDER BY id").rows.map { try $0.require(0) as Int }
            #expect(attempts == [1, 1])
        }
    }

    @Test func abandonedBatchIsClaimableAgainUnchanged() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try insertJobs(connection, count: 4)
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            try queue.abandon(connection)
            let again = try queue.claim(connection, limit: 10, apps: apps)
            #expect(Set(again.jobs) == Set(batch.jobs))
            try queue.abandon(connection)
        }
    }

    @Test func aTakenDedupeKeySkipsTheRowWhetherTheJobIsPendingOrDelivered() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let insert = """
                INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key) VALUES ('shop', $1, $2, 'order-1042-shipped')
                """
            #expect(try connection.query(insert, [Fixtures.token(1), Fixtures.payload]).affectedRows == 1)
            #expect(try connection.query(insert, [Fixtures.token(1).uppercased(), Fixtures.payload]).affectedRows == 0)
            #expect(try connection.query(insert + " ON CONFLICT DO NOTHING", [Fixtures.token(1), Fixtures.payload]).affectedRows == 0)
            #expect(try connection.query(insert + " ON CONFLICT (app, dedupe_key, device_token) WHERE dedupe_key IS NOT NULL DO NOTHING",
                                         [Fixtures.token(1), Fixtures.payload]).affectedRows == 0)
            #expect(try connection.query(insert, [Fixtures.token(2), Fixtures.payload]).affectedRows == 1)
            #expect(try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key) VALUES ('blog', $1, $2, 'order-1042-shipped')",
                                         [Fixtures.token(1), Fixtures.payload]).affectedRows == 1)
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            #expect(batch.jobs.count == 3)
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            #expect(try connection.query(insert + " ON CONFLICT DO NOTHING", [Fixtures.token(1), Fixtures.payload]).affectedRows == 0)
            #expect(try connection.query(insert, [Fixtures.token(1), Fixtures.payload]).affectedRows == 0)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 0)
        }
    }

    @Test func aRetriedJobKeepsItsDedupeKeyAndIsPutBack() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let insert = """
                INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key) VALUES ('shop', $1, $2, 'order-1042-shipped')
                """
            try connection.query(insert, [Fixtures.token(1), Fixtures.payload])
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            let job = try #require(batch.jobs.first)
            try queue.finish(connection, batch, JobOutcomes(retries: [JobRetry(id: job.id, runAt: Timestamp(), error: "500 InternalServerError")]))
            let again = try queue.claim(connection, limit: 10, apps: apps)
            #expect(again.jobs.map(\.id) == [job.id])
            #expect(again.jobs.first?.dedupeKey == "order-1042-shipped")
            #expect(again.jobs.first?.attempts == 1)
            try queue.finish(connection, again, JobOutcomes(failures: [JobFailure(id: job.id, status: 400, reason: "BadTopic")]))
            #expect(try connection.query(insert, [Fixtures.token(1), Fixtures.payload]).affectedRows == 0)
        }
    }

    @Test func aDedupeKeyPastItsRetentionIsSweptAndCanBeUsedAgain() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let ledger = DedupeLedger()
            let insert = """
                INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key) VALUES ('shop', $1, $2, $3)
                """
            try connection.query(insert, [Fixtures.token(1), Fixtures.payload, "sent"])
            try connection.query(insert, [Fixtures.token(2), Fixtures.payload, "queued"])
            try connection.query(insert, [Fixtures.token(3), Fixtures.payload, "recent"])
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            let queuedIDs = batch.jobs.filter { $0.dedupeKey == "queued" }.map(\.id)
            #expect(queuedIDs.count == 1)
            let sentIDs = batch.jobs.filter { $0.dedupeKey != "queued" }.map(\.id)
            let retryAt = Timestamp().addingTimeInterval(3600)
            let retries = queuedIDs.map { JobRetry(id: $0, runAt: retryAt, error: "500 InternalServerError") }
            try queue.finish(connection, batch, JobOutcomes(delivered: sentIDs, retries: retries))
            try connection.query("""
                UPDATE pushd.job_dedupe_keys SET created_at = now() - interval '25 hours' WHERE dedupe_key IN ('sent', 'queued')
                """)
            let swept = try ledger.sweep(connection, retentionSeconds: 24 * 3600)
            #expect(swept == 1)
            let kept = try connection.query("SELECT string_agg(dedupe_key, ',' ORDER BY dedupe_key) FROM pushd.job_dedupe_keys")
                .require(String.self, row: 0, column: 0)
            #expect(kept == "queued,recent")
            #expect(try connection.query(insert, [Fixtures.token(1), Fixtures.payload, "sent"]).affectedRows == 1)
            #expect(try connection.query(insert, [Fixtures.token(2), Fixtures.payload, "queued"]).affectedRows == 0)
            #expect(try connection.query(insert, [Fixtures.token(3), Fixtures.payload, "recent"]).affectedRows == 0)
        }
    }

    @Test func theSweepDeletesInBoundedBatches() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try connection.query("""
                INSERT INTO pushd.job_dedupe_keys (app, dedupe_key, device_token, job_id, created_at)
                SELECT 'shop', 'k' || g, $1, -g, now() - interval '2 days' FROM generate_series(1, 25) g
                """, [Fixtures.token(1)])
            let ledger = DedupeLedger()
            #expect(try ledger.sweep(connection, retentionSeconds: 3600, limit: 10) == 10)
            #expect(try ledger.sweep(connection, retentionSeconds: 3600, limit: 10) == 10)
            #expect(try ledger.sweep(connection, retentionSeconds: 3600, limit: 10) == 5)
            #expect(try ledger.sweep(connection, retentionSeconds: 3600, limit: 10) == 0)
        }
    }

    @Test func insertsNotifyOnlyWhileAClaimerSleepsOncePerStatementWithAConstantPayload() throws {
        try IsolatedDatabase.with { database in
            let listener = try database.connect()
            try queue.listen(listener)
            let writer = try database.connect()
            try insertJobs(writer, count: 10)
            #expect(try listener.waitForNotifications(timeoutMilliseconds: 200).isEmpty)
            try listener.query("INSERT INTO pushd.job_waiters (pid) VALUES (pg_backend_pid())")
            try insertJobs(writer, count: 100)
            let notifications = try listener.waitForNotifications(timeoutMilliseconds: 5000)
            #expect(notifications.count == 1)
            #expect(notifications.first?.channel == "pushd_jobs")
            #expect(notifications.first?.payload == "")
            #expect(try listener.waitForNotifications(timeoutMilliseconds: 100).isEmpty)
        }
    }

    @Test func aSleepingClaimerIsWokenByAnInsertAndDeregistersAfterwards() throws {
        try IsolatedDatabase.with { database in
            let woken = Lock<Bool?>(nil)
            let registered = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                defer { done.signal() }
                do {
                    let connection = try database.connect()
                    try queue.listen(connection)
                    registered.signal()
                    let result = try queue.sleepUntilJobs(connection, apps: apps, timeoutMilliseconds: 20_000)
                    woken.withLock { $0 = result }
                } catch {
                    Issue.record("sleeping claimer failed: \(error)")
                }
            }
            registered.wait()
            let writer = try database.connect()
            var waiting = 0
            for _ in 0..<200 where waiting == 0 {
                usleep(10_000)
                waiting = try writer.query("SELECT count(*) FROM pushd.job_waiters").require(Int.self, row: 0, column: 0)
            }
            #expect(waiting == 1)
            try insertJobs(writer, count: 1)
            #expect(done.wait(timeout: .now() + 10) == .success)
            #expect(woken.withLock { $0 } == true)
            #expect(try writer.query("SELECT count(*) FROM pushd.job_waiters").require(Int.self, row: 0, column: 0) == 0)
        }
    }

    @Test func sleepUntilJobsReturnsAtOnceWhenJobsAreAlreadyDueAndTimesOutOtherwise() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try queue.listen(connection)
            #expect(try queue.sleepUntilJobs(connection, apps: apps, timeoutMilliseconds: 50) == false)
            try insertJobs(connection, count: 1, runAtOffset: 3600)
            #expect(try queue.sleepUntilJobs(connection, apps: apps, timeoutMilliseconds: 50) == false)
            try insertJobs(connection, count: 1)
            #expect(try queue.sleepUntilJobs(connection, apps: apps, timeoutMilliseconds: 20_000) == true)
        }
    }

    @Test func aBusyClaimersWaitEndsAtANotificationSentForASleepingOneAndIgnoresStaleOnes() throws {
        try IsolatedDatabase.with { database in
            let sleeper = try database.connect()
            try sleeper.query("INSERT INTO pushd.job_waiters (pid) VALUES (pg_backend_pid())")
            let poller = try database.connect()
            try queue.listen(poller)
            let writer = try database.connect()
            // A notification that arrived before the wait is for a job the claim before it saw: not a wake-up.
            try insertJobs(writer, count: 1)
            // Time for it to reach the poller's socket, also on a loaded machine.
            Thread.sleep(forTimeInterval: 1)
            #expect(try queue.waitWhileBusy(poller, timeoutMilliseconds: 50) == .timedOut)
            // An insert during the wait ends it long before the time-out, also right after an
            // empty claim whose COMMIT was not waited for.
            #expect(try queue.claim(poller, limit: 10, apps: ["nobody"], commitEmptyWithoutWaiting: true).isEmpty)
            let started = Timestamp()
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: 0.3)
                do { try insertJobs(try database.connect(), count: 1) } catch { Issue.record("insert failed: \(error)") }
            }
            #expect(try queue.waitWhileBusy(poller, timeoutMilliseconds: 20_000) == .notified)
            #expect(Timestamp().timeIntervalSince(started) < 10)
        }
    }

    @Test func timesPushdCannotReadAreRefusedAtInsertNamingTheColumn() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let cases: [(String, String)] = [
                ("expiration", "'infinity'"), ("expiration", "'10000-01-01 00:00:00+00'"), ("run_at", "'-infinity'"),
                ("run_at", "'infinity'"), ("created_at", "'0044-03-15 00:00:00+00 BC'"),
            ]
            for (column, value) in cases {
                do {
                    try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, \(column)) VALUES ('shop', $1, $2, \(value))",
                                         [Fixtures.token(1), Fixtures.payload])
                    Issue.record("\(column) = \(value) was accepted")
                } catch let error as PGError {
                    #expect(error.code == .checkViolation)
                    #expect(error.constraint == "jobs_\(column)_readable")
                    #expect(error.message.hasPrefix("pushd.jobs.\(column) must be a time from the year 1 to the year 9999"), "\(error.message)")
                }
            }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, expiration) VALUES ('shop', $1, $2, '9999-12-31 23:59:59+00')",
                                 [Fixtures.token(2), Fixtures.payload])
            #expect(throws: PGError.self) {
                try connection.query("INSERT INTO pushd.campaigns (app, name, payload, expiration) VALUES ('shop', 'x', $1, 'infinity')", [Fixtures.payload])
            }
        }
    }

    @Test func aClaimedRowPushdCannotReadIsDeadLetteredInTheClaimAndTheRestAreClaimed() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            // As a row queued before the CHECK existed.
            try connection.execute(script: "ALTER TABLE pushd.jobs DROP CONSTRAINT jobs_expiration_readable")
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, expiration, run_at)
                VALUES ('shop', $1, $2, 'infinity', now() - interval '1 minute')
                """, [Fixtures.token(1), Fixtures.payload])
            try insertJobs(connection, count: 2, app: "blog")
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            #expect(batch.jobs.count == 2)
            #expect(batch.unreadable.map(\.app) == ["shop"])
            #expect(batch.unreadable.first?.reason.contains("infinity") == true)
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            let dead = try connection.query("SELECT device_token, expiration IS NULL, run_at < now(), reason FROM pushd.dead_jobs").rows
            #expect(dead.count == 1)
            #expect(try dead.first?.require(0, as: String.self) == Fixtures.token(1))
            #expect(try dead.first?.require(1, as: Bool.self) == true)
            #expect(try dead.first?.require(2, as: Bool.self) == true)
            // Alone in a claim, it is dead-lettered and the claim commits.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, expiration) VALUES ('shop', $1, $2, 'infinity')
                """, [Fixtures.token(2), Fixtures.payload])
            let alone = try queue.claim(connection, limit: 10, apps: apps)
            #expect(alone.isEmpty)
            #expect(alone.unreadable.count == 1)
            #expect(!connection.isInTransaction)
            #expect(try connection.query("SELECT count(*) FROM pushd.dead_jobs").require(Int.self, row: 0, column: 0) == 2)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 0)
        }
    }

    @Test func theClaimRunsOnItsGenericPlanAndTheBatchOnTheSessionsOwn() throws {
        try IsolatedDatabase.with { database in
            let claimer = try database.connect()
            // PostgreSQL's default planned this claim afresh at every run while it found nothing:
            // half of the database's CPU while jobs trickle in to busy claimers.
            for _ in 0..<20 { #expect(try queue.claim(claimer, limit: 10, apps: apps).isEmpty) }
            let plans = try claimer.query("""
                SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%claimed AS (DELETE FROM pushd.jobs%'
                """)
            #expect(plans.rowCount == 1)
            #expect(try plans.require(Int.self, row: 0, column: 0) == 20)
            #expect(try plans.require(Int.self, row: 0, column: 1) == 0)
            // The batch's own statements plan as the session does: the setting is the claim's alone.
            try insertJobs(try database.connect(), count: 2)
            let batch = try queue.claim(claimer, limit: 10, apps: apps)
            #expect(batch.jobs.count == 2)
            #expect(try claimer.query("SHOW plan_cache_mode").require(String.self, row: 0, column: 0) == "auto")
            try queue.finish(claimer, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
        }
    }

    @Test func aBusyClaimersEmptyClaimIsCommittedWithoutWaitingAndTheNextCallReadsTheAnswer() throws {
        try IsolatedDatabase.with { database in
            let claimer = try database.connect()
            let writer = try database.connect()
            #expect(try queue.claim(claimer, limit: 10, apps: apps, commitEmptyWithoutWaiting: true).isEmpty)
            #expect(claimer.hasPendingCommit)
            Thread.sleep(forTimeInterval: 0.05)
            try insertJobs(writer, count: 3)
            let batch = try queue.claim(claimer, limit: 10, apps: apps, commitEmptyWithoutWaiting: true)
            #expect(batch.jobs.count == 3)
            #expect(!claimer.hasPendingCommit)
            try queue.finish(claimer, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            #expect(!claimer.isInTransaction)
            // Any other statement reads the answer first and runs outside the claim's transaction:
            // a sleeping claimer's registration is seen by inserts at once.
            #expect(try queue.claim(claimer, limit: 10, apps: apps, commitEmptyWithoutWaiting: true).isEmpty)
            try claimer.query("INSERT INTO pushd.job_waiters (pid) VALUES (pg_backend_pid())")
            #expect(!claimer.hasPendingCommit)
            #expect(!claimer.isInTransaction)
            #expect(try writer.query("SELECT count(*) FROM pushd.job_waiters").require(Int.self, row: 0, column: 0) == 1)
            // So does the wait for notifications, once the answer is in.
            #expect(try queue.claim(claimer, limit: 10, apps: apps, commitEmptyWithoutWaiting: true).isEmpty)
            #expect(try queue.waitWhileBusy(claimer, timeoutMilliseconds: 200) == .timedOut)
            #expect(!claimer.hasPendingCommit)
            #expect(!claimer.isInTransaction)
            // Only an open transaction can be committed this way.
            #expect(throws: PGError.self) { try claimer.commitWithoutWaiting() }
        }
    }

    @Test func hasDueJobsIgnoresJobsHeldInAnotherClaimersOpenBatch() throws {
        try IsolatedDatabase.with { database in
            let claimer = try database.connect()
            let poller = try database.connect()
            try insertJobs(claimer, count: 3)
            #expect(try queue.hasDueJobs(poller, apps: apps))
            let batch = try queue.claim(claimer, limit: 10, apps: apps)
            #expect(batch.jobs.count == 3)
            #expect(try queue.hasDueJobs(poller, apps: apps) == false)
            try queue.finish(claimer, batch, JobOutcomes(retries: batch.jobs.map { JobRetry(id: $0.id, runAt: Timestamp(), error: "429") }))
            #expect(try queue.hasDueJobs(poller, apps: apps))
        }
    }

    @Test func aRolledBackClaimHidesItsJobsFromTheProbeButNotFromTheNextClaim() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try insertJobs(connection, count: 2)
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            try queue.abandon(connection)
            // The rows keep the aborted claim's xmax: why a polling claimer claims on every
            // tick rather than only when a probe sees work.
            #expect(try queue.hasDueJobs(connection, apps: apps) == false)
            #expect(Set(try queue.claim(connection, limit: 10, apps: apps).jobs) == Set(batch.jobs))
            try queue.abandon(connection)
        }
    }

    @Test func waitPolicyPollsRightAfterWorkAndSleepsOnceIdle() {
        let policy = JobWaitPolicy(pollInterval: 0.002, busyWindow: 1, sleepTimeout: 1.5)
        #expect(policy.step(idleSeconds: 0) == .poll(microseconds: 2000))
        #expect(policy.step(idleSeconds: 0.999) == .poll(microseconds: 2000))
        #expect(policy.step(idleSeconds: 1) == .sleep(milliseconds: 1500))
        #expect(policy.step(idleSeconds: 3600) == .sleep(milliseconds: 1500))
    }

    @Test func aClaimTakesOnlyTheGivenAppsAndLeavesTheRestQueuedUntouched() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try insertJobs(connection, count: 3, app: "shop")
            try insertJobs(connection, count: 2, app: "blog", runAtOffset: -60)
            #expect(try queue.hasDueJobs(connection, apps: ["shop"]))
            let batch = try queue.claim(connection, limit: 10, apps: ["shop"])
            #expect(batch.jobs.map(\.app) == ["shop", "shop", "shop"])
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            #expect(try queue.hasDueJobs(connection, apps: ["shop"]) == false)
            #expect(try queue.claim(connection, limit: 10, apps: ["shop"]).isEmpty)
            #expect(try queue.claim(connection, limit: 10, apps: []).isEmpty)
            let left = try connection.query("SELECT app, attempts, last_error FROM pushd.jobs")
            #expect(left.rowCount == 2)
            #expect(try left.rows.allSatisfy { try $0.require(0, as: String.self) == "blog" && $0.require(1, as: Int.self) == 0 && $0.get(2, as: String.self) == nil })
        }
    }

    @Test func aClaimLeavingAnEnvironmentOfAnAppSkipsItsJobsByTheirTokenOrTheAppsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            // shop is a production app leaving sandbox to other instances; blog leaves nothing.
            try TokenStore().register(connection, app: "shop", token: Fixtures.token(1), environment: "sandbox")
            try TokenStore().register(connection, app: "shop", token: Fixtures.token(2), environment: "production")
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, environment) VALUES
                  ('shop', $1, $4, NULL),         -- registered sandbox: left
                  ('shop', $2, $4, NULL),         -- registered production: taken
                  ('shop', $2, $4, 'sandbox'),    -- its own environment wins: left
                  ('shop', $3, $4, NULL),         -- unregistered: the app's production, taken
                  ('blog', $1, $4, 'sandbox')     -- another app: taken
                """, [Fixtures.token(1).uppercased(), Fixtures.token(2), Fixtures.token(3), Fixtures.payload])
            let leaving = JobQueue.Leaving(environments: ["shop": "sandbox"], home: ["shop": "production", "blog": "sandbox"])
            #expect(try queue.hasDueJobs(connection, apps: apps, leaving: leaving))
            let batch = try queue.claim(connection, limit: 10, apps: apps, leaving: leaving)
            #expect(batch.jobs.map { "\($0.app) \($0.deviceToken.suffix(1)) \($0.environment ?? $0.registeredEnvironment ?? "-")" }.sorted()
                    == ["blog 1 sandbox", "shop 2 production", "shop 3 -"])
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            // What is left is no work for this claimer: the probe does not call it due.
            #expect(try queue.hasDueJobs(connection, apps: apps, leaving: leaving) == false)
            #expect(try queue.hasDueJobs(connection, apps: apps))
            #expect(try queue.claim(connection, limit: 10, apps: apps, leaving: leaving).isEmpty)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 2)
            // Without the filter (no other instance sends sandbox) they are claimed as before.
            let rest = try queue.claim(connection, limit: 10, apps: apps)
            #expect(rest.jobs.count == 2)
            try queue.finish(connection, rest, JobOutcomes(delivered: rest.jobs.map(\.id)))
        }
    }

    @Test func aClaimLeavingTheTokenOnlyPushesOfAnAppSkipsThoseAndTakesTheRest() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            // shop has only a certificate here and leaves its Live Activity and location pushes,
            // also those of the environment it leaves; blog leaves nothing.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, push_type, environment) VALUES
                  ('shop', $1, $2, 'alert', NULL),
                  ('shop', $1, $3, 'liveactivity', NULL),
                  ('shop', $1, '{"aps":{}}', 'location', 'production'),
                  ('shop', $1, $2, 'alert', 'sandbox'),
                  ('blog', $1, $3, 'liveactivity', NULL)
                """, [Fixtures.token(1), Fixtures.payload, #"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#])
            let leaving = JobQueue.Leaving(environments: ["shop": "sandbox"], home: ["shop": "production", "blog": "sandbox"],
                                           tokenOnly: ["shop"], tokenOnlyPushTypes: ["liveactivity", "location"])
            #expect(!leaving.isEmpty && leaving.leaves("shop") && !leaving.leaves("blog"))
            #expect(!JobQueue.Leaving(tokenOnly: ["shop"], tokenOnlyPushTypes: ["location"]).isEmpty)
            #expect(try queue.hasDueJobs(connection, apps: apps, leaving: leaving))
            let batch = try queue.claim(connection, limit: 10, apps: apps, leaving: leaving)
            #expect(batch.jobs.map { "\($0.app) \($0.pushType) \($0.environment ?? "-")" }.sorted()
                    == ["blog liveactivity -", "shop alert -"])
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            #expect(try queue.hasDueJobs(connection, apps: apps, leaving: leaving) == false)
            #expect(try queue.claim(connection, limit: 10, apps: apps, leaving: leaving).isEmpty)
            // Leaving only the token-only pushes takes the sandbox alert.
            let tokenOnly = JobQueue.Leaving(home: ["shop": "production"], tokenOnly: ["shop"], tokenOnlyPushTypes: ["liveactivity", "location"])
            let sandbox = try queue.claim(connection, limit: 10, apps: apps, leaving: tokenOnly)
            #expect(sandbox.jobs.map { "\($0.pushType) \($0.environment ?? "-")" } == ["alert sandbox"])
            try queue.finish(connection, sandbox, JobOutcomes(delivered: sandbox.jobs.map(\.id)))
            #expect(try queue.hasDueJobs(connection, apps: apps, leaving: tokenOnly) == false)
            // Without the filter (no other instance has a token key) they are claimed as before.
            let rest = try queue.claim(connection, limit: 10, apps: apps)
            #expect(rest.jobs.map(\.pushType).sorted() == ["liveactivity", "location"])
            try queue.finish(connection, rest, JobOutcomes(delivered: rest.jobs.map(\.id)))
        }
    }

    @Test func withinAPriorityEveryAppLeadsSomeBatches() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try insertJobs(connection, count: 200, app: "shop", runAtOffset: -60)
            try insertJobs(connection, count: 200, app: "blog")
            var leaders = Set<String>()
            for _ in 0..<20 {
                let batch = try queue.claim(connection, limit: 5, apps: ["shop", "blog"])
                leaders.insert(try #require(batch.jobs.first).app)
                try queue.abandon(connection)
            }
            #expect(leaders == ["shop", "blog"])
        }
    }

    @Test func theDatabaseAcceptsExactlyTheAppNamesTheConfigurationDoes() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let names = ["shop", "shop-web", "shop_2", "9lives", String(repeating: "a", count: 64),
                         "Shop", "shop.web", "-shop", "_shop", "", String(repeating: "a", count: 65), "shöp", "shop web"]
            for name in names {
                let error = Fixtures.pgError {
                    try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ($1, $2, $3)",
                                         [name, Fixtures.token(1), Fixtures.payload])
                }
                #expect((error == nil) == AppName.isValid(name), "\(name): \(error?.message ?? "accepted")")
                if let error {
                    #expect(error.message.hasPrefix("pushd.jobs.app must be 1 to 64 lower-case letters, digits, '-' or '_', starting with a letter or digit, got"),
                            "\(error.message)")
                }
            }
            #expect(AppName.isValid("shop") && !AppName.isValid("Shop") && !AppName.isValid("shop.web"))
        }
    }

    /// `{"aps":{"alert":"xx…"}}` of exactly `bytes` bytes.
    static func payload(bytes: Int) -> String {
        #"{"aps":{"alert":""# + String(repeating: "x", count: bytes - 20) + #""}}"#
    }

    /// PushToTalk takes priority 10 and expiration 0 (Apple's PushToTalk framework), Live
    /// Activities priority 10 or 5 (ActivityKit): refused at INSERT naming column and rule.
    @Test func pushToTalkAndLiveActivityPrioritiesAndExpirationsAreRefusedAtInsert() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let insert = "INSERT INTO pushd.jobs (app, device_token, payload, push_type, priority, expiration) VALUES ('shop', $1, $2, $3, $4, $5::timestamptz)"
            let live = #"{"aps":{"timestamp":1700000000,"event":"end"}}"#
            let refused: [(String, Int?, String?, String)] = [
                ("pushtotalk", 5, nil, "pushd.jobs.priority must be 10 for a pushtotalk push (Apple: priority 10, expiration 0), got 5"),
                ("pushtotalk", nil, "2030-01-01 00:00:00+00",
                 "pushd.jobs.expiration must be NULL or 1970-01-01 00:00:00 UTC (apns-expiration 0) for a pushtotalk push, got 2030-01-01 00:00:00 UTC"),
                ("liveactivity", 1, nil, "pushd.jobs.priority must be 10 or 5 for a liveactivity push (ActivityKit takes no other), got 1"),
            ]
            for (pushType, priority, expiration, message) in refused {
                let payload = pushType == "liveactivity" ? live : "{}"
                let error = Fixtures.pgError { try connection.query(insert, [Fixtures.token(1), payload, pushType, priority, expiration]) }
                #expect(error?.message.hasPrefix(message) == true, "\(pushType): \(String(describing: error))")
            }
            try connection.query(insert, [Fixtures.token(1), "{}", "pushtotalk", Int?.none, "1970-01-01 00:00:00+00"])
            try connection.query(insert, [Fixtures.token(2), "{}", "pushtotalk", 10, String?.none])
            try connection.query(insert, [Fixtures.token(3), live, "liveactivity", 5, String?.none])
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 3)
        }
    }

    @Test func rulesThatNeedOnlyTheRowAreRefusedAtInsertWithTheColumnAndTheRule() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let insert = "INSERT INTO pushd.jobs (app, device_token, payload, push_type, priority) VALUES ('shop', $1, $2, $3, $4)"
            let refused: [(payload: String, pushType: String, priority: Int?, constraint: String, message: String)] = [
                (Self.payload(bytes: 4097), "alert", nil, "jobs_payload_size", "pushd.jobs.payload is 4097 bytes; alert payloads may have at most 4096"),
                (Self.payload(bytes: 5121), "voip", nil, "jobs_payload_size", "pushd.jobs.payload is 5121 bytes; voip payloads may have at most 5120"),
                (#"{"aps":{"content-available":1}}"#, "background", 10, "jobs_background_priority",
                 "pushd.jobs.priority must be 5 for a background push (APNs refuses 10 and 1), got 10"),
                (#"{"aps":{"content-available":1,"alert":"Hi"}}"#, "background", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must not carry "aps"."alert" in a background push"#),
                (#"{"aps":{"badge":1}}"#, "background", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload needs "content-available":1 in "aps" for a background push"#),
                (#"{"aps":"Hello"}"#, "alert", nil, "jobs_payload_shape", #"pushd.jobs.payload must have "aps" as a JSON object, got a JSON string"#),
                (#"{"aps":{"alert":"a"},"aps":{"alert":"b"}}"#, "alert", nil, "jobs_payload_shape",
                 "pushd.jobs.payload has the key 'aps' twice in one object (at aps)"),
                (#"{"aps":{"alert":{"title":"a","title":"b"}}}"#, "alert", nil, "jobs_payload_shape",
                 "pushd.jobs.payload has the key 'title' twice in one object (at aps.alert.title)"),
                (#"{"aps":{"alert":"a","badge":-1}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."badge" as a non-negative integer, got -1"#),
                (#"{"aps":{"alert":"a","badge":"3"}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."badge" as a non-negative integer, got "3""#),
                (#"{"aps":{"alert":"a","interruption-level":"loud"}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."interruption-level" as one of passive, active, time-sensitive, critical, got "loud""#),
                (#"{"aps":{"timestamp":1700000000,"event":"update"}}"#, "liveactivity", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload needs "aps"."content-state" for a liveactivity update event"#),
                (#"{"aps":{"timestamp":1700000000,"event":"stop"}}"#, "liveactivity", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."event" as one of start, update, end, got "stop""#),
                (#"{"aps":{}}"#, "mdm", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload needs the device's PushMagic string as top-level "mdm" for an mdm push"#),
                (#"{"aps":{"alert":"a","sound":5}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."sound" as a string or an object with name, critical and volume, got 5"#),
                (#"{"aps":{"alert":"a","sound":{"critical":1,"volume":0.5}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload needs "aps"."sound"."name" when "sound" is an object"#),
                (#"{"aps":{"alert":"a","sound":{"name":"siren","critical":1,"volume":1.5}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."sound"."volume" as a number from 0 to 1, got 1.5"#),
                (#"{"aps":{"alert":"a","sound":{"name":"siren","critical":true}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."sound"."critical" as the number 0 or 1, got true"#),
                (#"{"aps":{"alert":"a","thread-id":42}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."thread-id" as a string, got 42"#),
                (#"{"aps":{"alert":"a","category":["INVITE"]}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."category" as a string, got ["INVITE"]"#),
                (#"{"aps":{"alert":"a","target-content-id":null}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."target-content-id" as a string, got null"#),
                (#"{"aps":{"alert":"a","filter-criteria":1}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."filter-criteria" as a string, got 1"#),
                (#"{"aps":{"alert":"a","relevance-score":1.5}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."relevance-score" as a number from 0 to 1 (only Live Activities take any number), got 1.5"#),
                (#"{"aps":{"alert":"a","relevance-score":"high"}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."relevance-score" as a number, got "high""#),
                (#"{"aps":{"alert":"a","mutable-content":true}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."mutable-content" as the number 0 or 1, got true"#),
                (#"{"aps":{"content-available":"1"}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."content-available" as the number 0 or 1, got "1""#),
                (#"{"aps":{"alert":["a"]}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."alert" as a string or an object, got ["a"]"#),
                (#"{"aps":{"alert":{"title":"a","body":7}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."alert"."body" as a string, got 7"#),
                (#"{"aps":{"alert":{"loc-key":"GAME","loc-args":"Jenna"}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."alert"."loc-args" as an array of strings, got "Jenna""#),
                (#"{"aps":{"alert":{"loc-key":"GAME","loc-args":["Jenna",3]}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."alert"."loc-args"[1] as a string, got 3"#),
                (#"{"aps":{"timestamp":"1700000000","event":"end"}}"#, "liveactivity", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."timestamp" as a non-negative integer (epoch seconds), got "1700000000""#),
                (#"{"aps":{"timestamp":1700000000,"event":"end","dismissal-date":-1}}"#, "liveactivity", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."dismissal-date" as a non-negative integer (epoch seconds), got -1"#),
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{},"stale-date":1.5}}"#, "liveactivity", nil,
                 "jobs_payload_shape", #"pushd.jobs.payload must have "aps"."stale-date" as a non-negative integer (epoch seconds), got 1.5"#),
                (#"{"aps":{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"A","attributes":{},"input-push-channel":7}}"#,
                 "liveactivity", nil, "jobs_payload_shape", #"pushd.jobs.payload must have "aps"."input-push-channel" as a string, got 7"#),
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{},"alert":{"title":{"loc-args":["Panda"]}}}}"#, "liveactivity", nil,
                 "jobs_payload_shape", #"pushd.jobs.payload must have "aps"."alert"."title" as a string or an object with a string "loc-key" and "loc-args" an array of strings, got {"loc-args":["Panda"]}"#),
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{},"alert":{"body":{"loc-key":"K","loc-args":[1]}}}}"#, "liveactivity", nil,
                 "jobs_payload_shape", #"pushd.jobs.payload must have "aps"."alert"."body" as a string or an object with a string "loc-key" and "loc-args" an array of strings, got {"loc-key":"K","loc-args":[1]}"#),
                (#"{"aps":{"alert":{"title":{"loc-key":"K"}}}}"#, "alert", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."alert"."title" as a string, got {"loc-key":"K"}"#),
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":"2:1"}}"#, "liveactivity", nil, "jobs_payload_shape",
                 #"pushd.jobs.payload must have "aps"."content-state" as an object, got "2:1""#),
            ]
            for (index, row) in refused.enumerated() {
                let error = Fixtures.pgError { try connection.query(insert, [Fixtures.token(index), row.payload, row.pushType, row.priority]) }
                #expect(error?.constraint == row.constraint, "\(row.message): \(error?.message ?? "accepted")")
                #expect(error?.message.hasPrefix(row.message) == true, "\(error?.message ?? "accepted")")
            }
            let accepted: [(payload: String, pushType: String, priority: Int?)] = [
                (Self.payload(bytes: 4096), "alert", nil),
                (Self.payload(bytes: 5120), "voip", nil),
                (#"{"aps":{"content-available":1},"sync":{"items":[{"id":1},{"id":2}]}}"#, "background", nil),
                (#"{"aps":{"content-available":1}}"#, "background", 5),
                (#"{"custom":"no aps at all"}"#, "alert", nil),
                (#"{"aps":{"alert":"Meet at 10:30","badge":0,"interruption-level":"time-sensitive"}}"#, "alert", nil),
                (#"{"aps":{"timestamp":1700000000,"event":"end"}}"#, "liveactivity", nil),
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2:1"}}}"#, "liveactivity", nil),
                (#"{"mdm":"00000000-1111-2222-3333-444444444444"}"#, "mdm", nil),
                (#"{"aps":{"alert":{"title":"Game","loc-key":"GAME","loc-args":["Jenna","Frank"]},"sound":{"critical":1,"name":"siren","volume":0.8},"thread-id":"t","category":"INVITE","target-content-id":"w","relevance-score":0.5,"mutable-content":1,"filter-criteria":"work"}}"#, "alert", nil),
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{},"relevance-score":75,"stale-date":1700003600,"dismissal-date":0}}"#,
                 "liveactivity", nil),
                // ActivityKit's localized alert and a broadcast channel to start on, as Apple documents them.
                (#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{},"alert":{"title":{"loc-key":"%@ is on an adventure!","loc-args":["Power Panda"]},"body":{"loc-key":"%@ found a sword!","loc-args":["Power Panda"]},"sound":"chime.aiff"}}}"#,
                 "liveactivity", nil),
                (#"{"aps":{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"A","attributes":{},"input-push-channel":"dHJ5IHRoaXM=","alert":{"title":"t","body":"b"}}}"#,
                 "liveactivity", nil),
            ]
            for (index, row) in accepted.enumerated() {
                let error = Fixtures.pgError { try connection.query(insert, [Fixtures.token(100 + index), row.payload, row.pushType, row.priority]) }
                #expect(error == nil, "\(row.payload.prefix(60)): \(error?.message ?? "")")
            }
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == accepted.count)

            let campaigns = CampaignStore()
            let background = Fixtures.pgError {
                _ = try campaigns.create(connection, NewCampaign(app: "shop", name: "sync", pushType: "background", priority: 10,
                                                                 payload: #"{"aps":{"content-available":1}}"#))
            }
            #expect(background?.constraint == "campaigns_background_priority", "\(background?.message ?? "accepted")")
            let bellInCollapseID = Fixtures.pgError {
                _ = try campaigns.create(connection, NewCampaign(app: "shop", name: "bell", payload: Fixtures.payload, collapseID: "score\u{7}"))
            }
            #expect(bellInCollapseID?.constraint == "campaigns_collapse_id_printable", "\(bellInCollapseID?.message ?? "accepted")")
            #expect(bellInCollapseID?.message.hasPrefix("pushd.campaigns.collapse_id must not contain control characters (APNs refuses them), found U+0007 at position 6") == true,
                    "\(bellInCollapseID?.message ?? "accepted")")
            let before1970 = Fixtures.pgError {
                _ = try campaigns.create(connection, NewCampaign(app: "shop", name: "old", payload: Fixtures.payload,
                                                                 expiration: Timestamp(timeIntervalSince1970: -1)))
            }
            #expect(before1970?.constraint == "campaigns_expiration_valid", "\(before1970?.message ?? "accepted")")
            #expect(before1970?.message.hasPrefix("pushd.campaigns.expiration must not be before 1970-01-01 00:00:00 UTC") == true,
                    "\(before1970?.message ?? "accepted")")
            let oversized = Fixtures.pgError {
                _ = try campaigns.create(connection, NewCampaign(app: "shop", name: "big", payload: Self.payload(bytes: 4097)))
            }
            #expect(oversized?.message.hasPrefix("pushd.campaigns.payload is 4097 bytes; alert payloads may have at most 4096") == true,
                    "\(oversized?.message ?? "accepted")")
            let badSound = Fixtures.pgError {
                _ = try campaigns.create(connection, NewCampaign(app: "shop", name: "loud", payload: #"{"aps":{"alert":"a","sound":1}}"#))
            }
            #expect(badSound?.constraint == "campaigns_payload_shape", "\(badSound?.message ?? "accepted")")
            #expect(badSound?.message.hasPrefix(#"pushd.campaigns.payload must have "aps"."sound" as a string or an object"#) == true,
                    "\(badSound?.message ?? "accepted")")
            _ = try campaigns.create(connection, NewCampaign(app: "shop", name: "sync", pushType: "background",
                                                             payload: #"{"aps":{"content-available":1}}"#))
        }
    }

    @Test func notifyUserFansOutToEveryLiveTokenOfTheUserOnce() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let tokens = TokenStore()
            try tokens.register(connection, app: "shop", token: Fixtures.token(1), userID: "u1")
            try tokens.register(connection, app: "shop", token: Fixtures.token(2), userID: "u1", environment: "sandbox")
            try tokens.register(connection, app: "shop", token: Fixtures.token(3), userID: "u1")
            try tokens.register(connection, app: "shop", token: Fixtures.token(4), userID: "u2")
            try tokens.register(connection, app: "blog", token: Fixtures.token(5), userID: "u1")
            try tokens.prune(connection, app: "shop", token: Fixtures.token(3), reason: "BadDeviceToken", apnsTimestamp: nil)
            let sql = "SELECT pushd.notify_user('shop', 'u1', $1, p_dedupe_key => 'welcome')"
            #expect(try connection.query(sql, [Fixtures.payload]).require(Int.self, row: 0, column: 0) == 2)
            #expect(try connection.query(sql, [Fixtures.payload]).require(Int.self, row: 0, column: 0) == 0)
            let batch = try queue.claim(connection, limit: 10, apps: apps)
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            #expect(batch.jobs.map(\.deviceToken).sorted() == [Fixtures.token(1), Fixtures.token(2)])
            #expect(batch.jobs.allSatisfy { $0.userID == "u1" && $0.dedupeKey == "welcome" })
            #expect(batch.jobs.first { $0.deviceToken == Fixtures.token(2) }?.environment == "sandbox")
        }
    }

    @Test func claimWorkHandsOutDueJobsBeforeAnyCampaignChunk() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let campaigns = CampaignStore()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "sale", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: id, targets: (1...10).map { (Fixtures.token($0), nil) })
            try campaigns.start(connection, id: id)
            try insertJobs(connection, count: 3)
            let source = WorkSource()
            guard case .jobs(let batch) = try source.claimWork(connection, jobLimit: 10, owner: "w1", leaseSeconds: 30, apps: apps) else {
                Issue.record("expected jobs first")
                return
            }
            try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
            guard case .chunk(let chunk) = try source.claimWork(connection, jobLimit: 10, owner: "w1", leaseSeconds: 30, apps: apps) else {
                Issue.record("expected the campaign chunk once no job was due")
                return
            }
            #expect(chunk.targets.count == 10)
            #expect(try source.claimWork(connection, jobLimit: 10, owner: "w2", leaseSeconds: 30, apps: apps) == .none)
        }
    }

    /// A held topic scope's due jobs are put back in one statement: the push types given, the
    /// environment as the sender picks it (the job's, else its token's registered one, else the
    /// app's), not jobs of another scope, not jobs scheduled for later, not rows another claimer
    /// holds; attempts untouched; `release` makes them due again.
    @Test func deferJobsPutsBackExactlyTheHeldScopesDueJobs() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let other = try database.connect()
            try connection.query("INSERT INTO pushd.device_tokens (app, token, environment) VALUES ('shop', $1, 'sandbox'), ('shop', $2, 'production')",
                                 [Fixtures.token(1), Fixtures.token(2)])
            func insert(_ seed: Int, pushType: String = "voip", environment: String? = nil, app: String = "shop", later: Bool = false) throws -> Int64 {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, push_type, environment, run_at)
                    VALUES ($1, $2, '{"aps":{}}', $3, $4, now() + make_interval(secs => $5)) RETURNING id
                    """, [app, Fixtures.token(seed), pushType, environment, later ? 3600 : 0]).require(Int64.self, row: 0, column: 0)
            }
            let registeredSandbox = try insert(1)
            let registeredProduction = try insert(2)
            let appDefault = try insert(3)
            let ownSandbox = try insert(2, environment: "sandbox")
            let ownProduction = try insert(1, environment: "production")
            let alert = try insert(4, pushType: "alert")
            let otherApp = try insert(5, app: "blog")
            let scheduled = try insert(6, later: true)
            let locked = try insert(7)
            try other.execute(script: "BEGIN")
            try other.query("SELECT id FROM pushd.jobs WHERE id = $1 FOR UPDATE", [locked])

            let until = Timestamp().addingTimeInterval(300)
            let held = HeldWork()
            let deferred = try held.deferJobs(connection, app: "shop", pushTypes: ["voip"], environment: "sandbox", appEnvironment: "sandbox",
                                              until: until, reason: "TopicDisallowed", limit: 2)
            #expect(deferred == 2)
            #expect(try held.deferJobs(connection, app: "shop", pushTypes: ["voip"], environment: "sandbox", appEnvironment: "sandbox",
                                       until: until, reason: "TopicDisallowed", limit: 2) == 1)
            try other.execute(script: "ROLLBACK")
            let putBack = try connection.query("""
                SELECT id FROM pushd.jobs WHERE run_at > now() + interval '200 seconds' AND run_at < now() + interval '400 seconds'
                  AND last_error = 'sending held: TopicDisallowed' AND attempts = 0 ORDER BY id
                """).rows.map { try $0.require(0, as: Int64.self) }
            #expect(putBack == [registeredSandbox, appDefault, ownSandbox])
            #expect(try queue.hasDueJobs(connection, apps: ["shop", "blog"]))
            let due = try connection.query("SELECT id FROM pushd.jobs WHERE run_at <= now() ORDER BY id").rows.map { try $0.require(0, as: Int64.self) }
            #expect(due == [registeredProduction, ownProduction, alert, otherApp, locked])
            _ = scheduled

            #expect(try held.release(connection, app: "shop") == 3)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs WHERE run_at <= now()").require(Int.self, row: 0, column: 0) == 8)
        }
    }
}
