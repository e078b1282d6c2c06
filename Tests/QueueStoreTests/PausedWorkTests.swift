import PushdTestSupport
import QueueStore
import Testing

/// What a paused app's workers put back (30 s at a time, `HeldWork.appPausedPrefix`) is made
/// due the moment the app is resumed: in batches, passing over rows another claimer's open
/// batch holds, and nothing put back for another reason or of another app.
@Suite struct PausedWorkTests {
    @Test func whatThePausePutBackIsMadeDueInBatchesPassingOverAnOpenBatch() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at, last_error)
                SELECT 'shop', repeat(lpad(to_hex(g), 16, '0'), 4), $1, now() + interval '30 seconds',
                       'app paused: InvalidProviderToken'
                FROM generate_series(1, 130) g
                """, [Fixtures.payload])
            let others: [(String, String)] = [
                ("shop", "HTTP 503 ServiceUnavailable"), // waits for APNs, not for the pause
                ("shop", "sending held: TopicDisallowed"), // a held topic ends with its hold
                ("news", "app paused: InvalidProviderToken"), // another app, still paused
            ]
            for (index, row) in others.enumerated() {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, run_at, last_error)
                    VALUES ($1, $2, $3, now() + interval '30 seconds', $4)
                    """, [row.0, Fixtures.token(1000 + index), Fixtures.payload, row.1])
            }
            let campaign = try connection.query("INSERT INTO pushd.campaigns (app, name, status) VALUES ('shop', 'sale', 'running') RETURNING id")
                .require(Int64.self, row: 0, column: 0)
            try connection.query("""
                INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error)
                VALUES ($1, 0, 0, $2, now() + interval '30 seconds', 1, now(), 'sending paused: InvalidProviderToken')
                """, [campaign, Fixtures.token(2000)])
            let claimer = try database.connect()
            defer { claimer.close() }
            try claimer.execute(script: "BEGIN")
            try claimer.query("SELECT id FROM pushd.jobs WHERE app = 'shop' AND last_error ^@ 'app paused' ORDER BY id LIMIT 1 FOR UPDATE")

            #expect(try HeldWork().releasePaused(connection, app: "shop", batch: 50) == 129 + 1)
            let waiting = #"SELECT coalesce(string_agg(app || ': ' || last_error, '|' ORDER BY (app || ': ' || last_error) COLLATE "C"), '') FROM pushd.jobs WHERE run_at > now()"#
            #expect(try connection.query(waiting).require(String.self, row: 0, column: 0)
                    == "news: app paused: InvalidProviderToken|shop: HTTP 503 ServiceUnavailable|shop: app paused: InvalidProviderToken|shop: sending held: TopicDisallowed")
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_retries WHERE due_at <= now()").require(Int.self, row: 0, column: 0) == 1)
            try claimer.execute(script: "ROLLBACK")
            #expect(try HeldWork().releasePaused(connection, app: "shop", batch: 50) == 1)
            #expect(try HeldWork().releasePaused(connection, app: "shop", batch: 50) == 0)
        }
    }
}
