import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A transactional batch is claimed by a DELETE in a transaction that stays open while it is
/// sent. When that session is cut after APNs has taken the batch, the rollback puts every job
/// back in the queue: pushd knows what APNs answered and records it on a new session, instead of
/// sending every notification of the batch a second time.
@Suite(.serialized) struct TransactionalSessionLossTests {
    @Test func aBatchWhoseSessionIsCutWhileInFlightIsRecordedAgainAndNotSentTwice() throws {
        try IsolatedDatabase.with { database in
            // Answers take 4 s: the batches are at APNs, unanswered, when the sessions are cut (four
            // claims, 400 sends, the test's poll and the cut fit in that on a loaded machine).
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 4000))
            let connection = try database.connect()
            // Four workers of 100 jobs each: four batches in flight at once.
            let daemon = try TLSFailurePausesAppTests.Daemon(
                config: try harness.writeConfigFile(appending: "workers:\n  transactional: 4\n  batch_size: 100\n"), log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 20) { daemon.metricsAddress != nil })
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances") == 1 })

            let count = 400
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, $1::int) g
                """, [count])
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.requestsReceived >= count })
            let answeredBeforeCut = harness.mock.stats.accepted
            let cut = try connection.query("""
                SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'pushd-jobs%') t
                """).require(Int.self, row: 0, column: 0)
            #expect(cut >= 1)
            #expect(answeredBeforeCut < count, "the batches were answered before their sessions were cut")

            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            // Time for a batch sent again to be answered.
            Thread.sleep(forTimeInterval: 5)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let perToken = harness.mock.stats.perToken
            #expect(perToken.count == count)
            let twice = perToken.filter { $0.value.accepted != 1 }
            #expect(twice.isEmpty, "\(twice.count) tokens accepted other than once, e.g. \(twice.first.map { "\($0.key): \($0.value.accepted)" } ?? "")")

            // Each batch's count and line follow the COMMIT that recorded it on a new session.
            func recordedAgain() -> Int {
                Int(daemon.metrics().split(separator: "\n")
                    .filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && $0.contains("result=\"recorded_again\"") }
                    .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +))
            }
            #expect(DaemonHarness.wait(seconds: 10) { recordedAgain() >= count && daemon.text.contains("batch_recorded_again") })
            Thread.sleep(forTimeInterval: 0.2)
            let lines = daemon.text
            let recorded = lines.split(separator: "\n").filter { $0.contains("batch_recorded_again") }
            #expect(!recorded.isEmpty, "no batch_recorded_again line in \(lines)")
            #expect(recorded.allSatisfy { $0.contains("were recorded again on a new session") && $0.contains("0 will be sent again") },
                    "\(recorded)")
            let metrics = daemon.metrics()
            let again = metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && $0.contains("result=\"recorded_again\"") }
            let total = again.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
            // Every notification of the cut batches was accepted once and recorded on a new session.
            #expect(Int(total) == count, "\(again)")
            let givenUp = metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && $0.contains("result=\"given_up\"") }
            #expect(givenUp.isEmpty, "\(givenUp)")
        }
    }

    @Test func aBatchWhoseCommitFailsAfterSendingIsRecordedAgainAndNotSentTwice() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 200))
            let connection = try database.connect()
            // The first COMMIT that deletes a job fails (a deferred trigger raises once: the
            // sequence is not rolled back with it); every later one goes through.
            try connection.execute(script: """
                CREATE SEQUENCE public.commit_failures;
                CREATE FUNCTION public.fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF nextval('public.commit_failures') = 1 THEN RAISE EXCEPTION 'this COMMIT is refused once'; END IF;
                    RETURN NULL;
                END $$;
                CREATE CONSTRAINT TRIGGER fail_first_commit AFTER DELETE ON pushd.jobs
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.fail_first_commit();
                """)
            let daemon = try TLSFailurePausesAppTests.Daemon(
                config: try harness.writeConfigFile(appending: "workers:\n  transactional: 4\n  batch_size: 100\n"), log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances") == 1 })

            let count = 50
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, $1::int) g
                """, [count])
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 1.5)
            #expect(try DaemonHarness.count(connection, "SELECT last_value FROM public.commit_failures") >= 2)
            let perToken = harness.mock.stats.perToken
            #expect(perToken.count == count)
            let twice = perToken.filter { $0.value.accepted != 1 }
            #expect(twice.isEmpty, "\(twice.count) tokens accepted other than once")
            // The line follows the COMMIT that recorded the batch again.
            #expect(DaemonHarness.wait(seconds: 10) { daemon.text.contains("batch_recorded_again") })
            let recorded = daemon.text.split(separator: "\n").filter { $0.contains("batch_recorded_again") }
            #expect(recorded.count == 1 && recorded.allSatisfy { $0.contains("this COMMIT is refused once") && $0.contains("\(count) notifications APNs accepted were recorded again") },
                    "\(recorded)")
        }
    }

    /// A COMMIT refused every time (a trigger, a constraint: an error that is not of the
    /// server's moment) is tried once more on the batch taken back, then given up, loudly.
    /// It was retried for 5 minutes, the worker held while the rows it rolled back each time
    /// were claimed and sent again by others.
    @Test func aCommitRefusedEveryTimeIsGivenUpAfterOneMoreTryNotRetriedForMinutes() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            try connection.execute(script: """
                CREATE FUNCTION public.refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'this COMMIT is always refused'; END $$;
                CREATE CONSTRAINT TRIGGER refuse_commit AFTER DELETE ON pushd.jobs
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.refuse_commit();
                """)
            let daemon = try TLSFailurePausesAppTests.Daemon(
                config: try harness.writeConfigFile(appending: "workers:\n  transactional: 1\n  batch_size: 10\n"), log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.instances") == 1 })

            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, 10) g
                """)
            func givenUp() -> [Substring] {
                daemon.text.split(separator: "\n").filter { $0.contains("batch_outcomes_given_up") }
            }
            #expect(DaemonHarness.wait(seconds: 15) { !givenUp().isEmpty }, "no batch_outcomes_given_up line within 15 s")
            #expect(givenUp().first?.contains("this COMMIT is always refused") == true, "\(givenUp())")
            // Nothing is lost: the jobs are still queued (or being claimed again).
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            try connection.execute(script: "DROP TRIGGER refuse_commit ON pushd.jobs;")
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(daemon.process.isRunning, "a refused COMMIT stops no worker: \(daemon.text.suffix(2000))")
        }
    }

    /// The prunes of a batch are written in its transaction: when its COMMIT fails they are rolled
    /// back and written again with the batch taken back. They were counted in
    /// `pushd_tokens_pruned_total` both times.
    @Test func prunesOfABatchRecordedAgainAreCountedOnce() throws {
        try IsolatedDatabase.with { database in
            let count = 20
            let tokens = (1...count).map { String(format: "%064x", $0) }
            let learned = Int64(Timestamp().timeIntervalSince1970 * 1000) + 60_000
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(
                unregisteredTokens: Dictionary(uniqueKeysWithValues: tokens.map { ($0, learned) })))
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment) SELECT 'shop', t, 'sandbox' FROM unnest($1::text[]) t
                """, [tokens])
            try connection.execute(script: """
                CREATE SEQUENCE public.commit_failures;
                CREATE FUNCTION public.fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF nextval('public.commit_failures') = 1 THEN RAISE EXCEPTION 'this COMMIT is refused once'; END IF;
                    RETURN NULL;
                END $$;
                CREATE CONSTRAINT TRIGGER fail_first_commit AFTER DELETE ON pushd.jobs
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.fail_first_commit();
                """)
            var config = harness.config()
            config.transactionalWorkers = 1
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(config, log: log)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', t, '{"aps":{"alert":"x"}}' FROM unnest($1::text[]) t
                """, [tokens])
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == count
            })
            // The line and the count follow the COMMIT that moved the jobs: wait for them too.
            #expect(DaemonHarness.wait(seconds: 10) { log.lines.contains { $0.contains("batch_recorded_again") } },
                    "the COMMIT did not fail: \(log.lines)")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == count)
            func pruned() -> [Substring] {
                pipeline.context.metrics.registry.expositionText().split(separator: "\n")
                    .filter { $0.hasPrefix("pushd_tokens_pruned_total{") }
            }
            func total() -> Int {
                Int(pruned().compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +))
            }
            #expect(DaemonHarness.wait(seconds: 10) { total() >= count }, "\(pruned())")
            // Counted once: not more after a while.
            Thread.sleep(forTimeInterval: 0.5)
            #expect(total() == count, "\(pruned())")
        }
    }

    /// A batch given up after its COMMIT was refused twice: each refusal is one database error,
    /// not the last one counted again by the worker's loop.
    @Test func aBatchGivenUpCountsEachDatabaseErrorOnce() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            try connection.execute(script: """
                CREATE FUNCTION public.refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'this COMMIT is always refused'; END $$;
                CREATE CONSTRAINT TRIGGER refuse_commit AFTER DELETE ON pushd.jobs
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.refuse_commit();
                """)
            var config = harness.config()
            config.transactionalWorkers = 1
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(config, log: log)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, 10) g
                """)
            pipeline.start()
            #expect(DaemonHarness.wait(seconds: 15) { log.lines.contains { $0.contains("batch_outcomes_given_up") } })
            pipeline.stop(deadline: Timestamp().addingTimeInterval(5))
            let givenUp = log.lines.count { $0.contains("batch_outcomes_given_up") }
            let errors = pipeline.context.metrics.registry.expositionText().split(separator: "\n")
                .filter { $0.hasPrefix("pushd_database_errors_total{") && $0.contains(#"reason="P0""#) }
            let total = errors.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
            // Two refused COMMITs per batch given up: the first, and the one of the batch taken back.
            #expect(givenUp >= 1)
            #expect(Int(total) == 2 * givenUp, "\(givenUp) batches given up, \(errors)")
        }
    }
}
