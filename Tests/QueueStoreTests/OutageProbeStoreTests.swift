import Foundation
import PushdTestSupport
import QueueStore
import Testing

/// The statements that make one waiting row of each down app due, so that its answer can show
/// APNs is back: the soonest of the rows that waited for APNs, never a row scheduled later by
/// its sender, retried for another reason or being sent.
@Suite struct OutageProbeStoreTests {
    static let prefixes = ["transport: ", "not sent: ", "HTTP 5"]

    @Test func theSoonestJobThatWaitedForApnsIsMadeDueOnePerApp() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let rows: [(String, Int, Int, String?)] = [
                ("shop", 10, 300, "HTTP 500 InternalServerError"),
                ("shop", 5, 100, "transport: Connection refused"),
                ("shop", 10, 20, nil), // scheduled by its sender
                ("shop", 10, 30, "TooManyRequests"), // a 429 for its token
                ("news", 1, 200, "not sent: no connection"),
                ("other", 10, 10, "HTTP 503 ServiceUnavailable"), // not asked for
            ]
            for (index, row) in rows.enumerated() {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, priority, run_at, last_error)
                    VALUES ($1, $2, $3, $4::smallint, now() + make_interval(secs => $5), $6)
                    """, [row.0, Fixtures.token(index + 1), Fixtures.payload, row.1, row.2, row.3])
            }
            let queue = JobQueue()
            let due = "SELECT coalesce(string_agg(last_error, '|' ORDER BY last_error), '') FROM pushd.jobs WHERE run_at <= now()"
            #expect(try queue.makeSoonestDue(connection, apps: ["news", "shop"], errorPrefixes: Self.prefixes) == 2)
            #expect(try connection.query(due).require(String.self, row: 0, column: 0) == "not sent: no connection|transport: Connection refused")
            #expect(try queue.makeSoonestDue(connection, apps: ["news", "shop"], errorPrefixes: Self.prefixes) == 1)
            #expect(try queue.makeSoonestDue(connection, apps: ["news", "shop"], errorPrefixes: Self.prefixes) == 0)
            #expect(try connection.query(due).require(String.self, row: 0, column: 0)
                    == "HTTP 500 InternalServerError|not sent: no connection|transport: Connection refused")
            #expect(try queue.makeSoonestDue(connection, apps: [], errorPrefixes: Self.prefixes) == 0)
        }
    }

    /// After the outage every job that waited for APNs is made due, in batches (one UPDATE of
    /// millions outran the statement timeout), and a job locked by another claimer's open batch
    /// is passed over instead of waited for: the UPDATE used to wait for that batch's answers.
    @Test func everyJobThatWaitedIsMadeDueInBatchesPassingOverAnOpenBatchsJob() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at, last_error)
                SELECT 'shop', repeat(lpad(to_hex(g), 16, '0'), 4), $1, now() + interval '5 minutes',
                       CASE WHEN g % 5 = 0 THEN 'BadDeviceToken' ELSE 'HTTP 503 ServiceUnavailable' END
                FROM generate_series(1, 250) g
                """, [Fixtures.payload])
            let claimer = try database.connect()
            defer { claimer.close() }
            try claimer.execute(script: "BEGIN")
            try claimer.query("SELECT id FROM pushd.jobs WHERE last_error ^@ 'HTTP' ORDER BY id LIMIT 1 FOR UPDATE")
            try connection.execute(script: "SET statement_timeout = '3s'")
            let started = Date()
            #expect(try JobQueue().makeDue(connection, app: "shop", errorPrefixes: Self.prefixes, batch: 64) == 199)
            #expect(Date().timeIntervalSince(started) < 2.5)
            let waiting = "SELECT count(*) FROM pushd.jobs WHERE run_at > now() AND last_error ^@ 'HTTP'"
            #expect(try connection.query(waiting).require(Int.self, row: 0, column: 0) == 1)
            try claimer.execute(script: "ROLLBACK")
            #expect(try JobQueue().makeDue(connection, app: "shop", errorPrefixes: Self.prefixes, batch: 64) == 1)
            #expect(try connection.query(waiting).require(Int.self, row: 0, column: 0) == 0)
        }
    }

    @Test func theSoonestBroadcastAndChannelRequestNotBeingSentAreMadeDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            for _ in 0..<3 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                     [BroadcastStoreTests.channel, BroadcastStoreTests.update])
                try connection.query("SELECT pushd.create_channel('shop', 'none')")
            }
            // The soonest is being sent (leased, its error from the send before); then one at 100 s,
            // one at 200 s.
            for table in ["broadcast_jobs", "channels"] {
                let error = table == "channels" ? "outcome" : "last_error"
                try connection.query("""
                    UPDATE pushd.\(table) SET \(error) = 'HTTP 503 ServiceUnavailable',
                        run_at = now() + make_interval(secs => CASE r WHEN 1 THEN 10 ELSE r * 100 - 100 END),
                        leased_until = CASE r WHEN 1 THEN now() + interval '60 seconds' END
                    FROM (SELECT id, row_number() OVER (ORDER BY id) r FROM pushd.\(table)) o WHERE o.id = pushd.\(table).id
                    """)
            }
            let broadcasts = BroadcastQueue()
            let channels = ChannelStore()
            let dueSecond = { (table: String) in
                try connection.query("""
                    SELECT coalesce(array_agg(r ORDER BY r), '{}') FROM (
                        SELECT id, run_at <= now() AS due, row_number() OVER (ORDER BY id) r FROM pushd.\(table)) o WHERE due
                    """).require([Int64].self, row: 0, column: 0)
            }
            #expect(try broadcasts.makeSoonestDue(connection, apps: ["shop"], errorPrefixes: ["transport: "]) == 0)
            #expect(try broadcasts.makeSoonestDue(connection, apps: ["shop"], errorPrefixes: Self.prefixes) == 1)
            #expect(try dueSecond("broadcast_jobs") == [2])
            #expect(try channels.makeSoonestDue(connection, apps: ["shop"], outcomePrefixes: Self.prefixes) == 1)
            #expect(try dueSecond("channels") == [2])
            #expect(try channels.makeSoonestDue(connection, apps: ["shop"], outcomePrefixes: Self.prefixes) == 1)
            #expect(try channels.makeSoonestDue(connection, apps: ["shop"], outcomePrefixes: Self.prefixes) == 0)
            #expect(try dueSecond("channels") == [2, 3], "the leased request was made due")
        }
    }

    @Test func theSoonestParkedTargetOfARunningCampaignIsMadeDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let running = try connection.query("INSERT INTO pushd.campaigns (app, name, status) VALUES ('shop', 'sale', 'running') RETURNING id")
                .require(Int64.self, row: 0, column: 0)
            let paused = try connection.query("INSERT INTO pushd.campaigns (app, name, status) VALUES ('shop', 'news', 'paused') RETURNING id")
                .require(Int64.self, row: 0, column: 0)
            let parked: [(Int64, Int, String)] = [
                (paused, 5, "HTTP 500 InternalServerError"), // its campaign is not sent now
                (running, 50, "TooManyRequests"),
                (running, 100, "HTTP 500 InternalServerError"),
                (running, 200, "transport: timed out"),
            ]
            for (position, target) in parked.enumerated() {
                try connection.query("""
                    INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error)
                    VALUES ($1, 0, $2::int, $3, now() + make_interval(secs => $4), 1, now(), $5)
                    """, [target.0, position, Fixtures.token(position + 1), target.1, target.2])
            }
            let store = CampaignStore()
            let due = "SELECT coalesce(array_agg(position ORDER BY position), '{}') FROM pushd.campaign_retries WHERE due_at <= now()"
            #expect(try store.makeSoonestParkedDue(connection, apps: ["news"], errorPrefixes: Self.prefixes) == 0)
            #expect(try store.makeSoonestParkedDue(connection, apps: ["shop"], errorPrefixes: Self.prefixes) == 1)
            #expect(try connection.query(due).require([Int32].self, row: 0, column: 0) == [2])
            #expect(try store.makeSoonestParkedDue(connection, apps: ["shop"], errorPrefixes: Self.prefixes) == 1)
            #expect(try store.makeSoonestParkedDue(connection, apps: ["shop"], errorPrefixes: Self.prefixes) == 0)
            #expect(try connection.query(due).require([Int32].self, row: 0, column: 0) == [2, 3])
        }
    }
}
