import Foundation
import APNsMock
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// The real pushd process against a queue where an operator added a CHECK NOT VALID after some
/// work was put back: the statements that make waiting work due must not fail as a whole, on
/// every attempt, for one old row the check refuses.
@Suite(.serialized) struct NotValidDaemonTests {
    /// At start pushd makes what a pause put back due (`HeldWork.releasePaused`): the jobs go
    /// out at once, the old one goes to dead letters, counted and named in one error line.
    @Test func pausedWorkIsDueAtStartAndAnOldJobACheckRefusesIsDeadLetteredLoudly() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let big = #"{"aps":{"alert":{"title":"Shipped","body":"\#(String(repeating: "x", count: 120))"}}}"#
            let old = try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at, last_error)
                VALUES ('shop', $1, $2, now() + interval '1 hour', 'app paused: InvalidProviderToken') RETURNING id
                """, [DaemonHarness.token(900), big]).require(Int64.self, row: 0, column: 0)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at, last_error)
                SELECT 'shop', repeat(lpad(to_hex(g), 16, '0'), 4), '{"aps":{"alert":"hi"}}', now() + interval '1 hour',
                       'app paused: InvalidProviderToken'
                FROM generate_series(1, 3) g
                """)
            _ = try connection.execute(script: "ALTER TABLE pushd.jobs ADD CONSTRAINT jobs_payload_small CHECK (octet_length(payload) <= 100) NOT VALID")

            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "the paused work still waits: \(daemon.text.suffix(3000))")
            #expect(harness.mock.stats.accepted == 3)
            let dead = try connection.query("SELECT id, reason FROM pushd.dead_jobs")
            #expect(dead.rowCount == 1)
            if dead.rowCount == 1 {
                #expect(try dead.require(Int64.self, row: 0, column: 0) == old)
                #expect(try dead.require(String.self, row: 0, column: 1).contains("CHECK jobs_payload_small"))
            }
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_dead_letters_total{app="shop",lane="transactional",reason="requeue_refused"} 1"#)
            })
            // The line follows the count.
            #expect(DaemonHarness.wait(seconds: 5) { daemon.text.contains(#""event":"rewrite_refused""#) })
            let lines = daemon.text.split(separator: "\n").filter { $0.contains(#""event":"rewrite_refused""#) }
            #expect(lines.count == 1, "\(daemon.text.suffix(3000))")
            #expect(lines.first?.contains("jobs_payload_small") == true && lines.first?.contains("pushd.jobs") == true
                    && lines.first?.contains(String(old)) == true, "\(lines)")
        }
    }

    /// A batch's token prunes run inside its claim's transaction: a prune a CHECK of
    /// pushd.device_tokens refuses (an operator's rule on user ids an old registration breaks)
    /// failed the transaction, and the whole batch was claimed and sent again, every turn.
    @Test func aTokenPruneACheckRefusesLeavesTheTokenAndTheBatchIsSentOnce() throws {
        let bad = DaemonHarness.token(3)
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(badDeviceTokens: [bad]))
            let connection = try database.connect()
            defer { connection.close() }
            try TokenStore().register(connection, app: "shop", token: bad, userID: "a-user-id-longer-than-ten", environment: "sandbox")
            _ = try connection.execute(script: """
                ALTER TABLE pushd.device_tokens ADD CONSTRAINT device_tokens_user_id_short CHECK (length(user_id) <= 10) NOT VALID
                """)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload) VALUES
                  ('shop', $1, '{"aps":{"alert":"a"}}'), ('shop', $2, '{"aps":{"alert":"b"}}'),
                  ('shop', $3, '{"aps":{"alert":"c"}}'), ('shop', $4, '{"aps":{"alert":"d"}}')
                """, [DaemonHarness.token(1), DaemonHarness.token(2), bad, DaemonHarness.token(4)])

            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "the batch was not settled: \(daemon.text.suffix(3000))")
            Thread.sleep(forTimeInterval: 2)
            #expect(harness.mock.stats.accepted == 3, "each job once")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs WHERE reason = 'BadDeviceToken'") == 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NULL") == 1,
                    "the token the check refuses to write stays as it was")
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains(#"reason="prune_refused"} 1"#) })
            // The line follows the count.
            #expect(DaemonHarness.wait(seconds: 5) { daemon.text.contains(#""event":"token_prune_refused""#) })
            let lines = daemon.text.split(separator: "\n").filter { $0.contains(#""event":"token_prune_refused""#) }
            #expect(lines.count == 1 && lines.first?.contains("device_tokens_user_id_short") == true, "\(daemon.text.suffix(3000))")
        }
    }
}
