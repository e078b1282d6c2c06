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

    /// After an outage of both environments of an app, making what waited for one of them due,
    /// a batch at a time, reads the other's waiting jobs once, not again in every batch: each
    /// batch goes on after the last job the previous one made due. Counted as the rows the
    /// index scans of the transaction fetched (`pg_stat_xact_user_tables`), with sequential
    /// scans off so that the plan is the one a large queue gets.
    @Test func makingOneEnvironmentsJobsDueInBatchesReadsTheOtherEnvironmentsJobsOnce() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            // 2,000 jobs to sandbox due sooner than 100 jobs to production (the app's environment).
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, environment, run_at, last_error)
                SELECT 'shop', repeat(lpad(to_hex(g), 16, '0'), 4), $1, CASE WHEN g <= 2000 THEN 'sandbox' END,
                       now() + interval '1 minute' + g * interval '1 millisecond', 'HTTP 503 ServiceUnavailable'
                FROM generate_series(1, 2100) g
                """, [Fixtures.payload])
            _ = try connection.execute(script: "ANALYZE pushd.jobs")
            _ = try connection.execute(script: "BEGIN; SET LOCAL enable_seqscan = off")
            let production = OutageEnvironment(name: "production", home: ["shop": "production"])
            #expect(try JobQueue().makeDue(connection, app: "shop", environment: production, errorPrefixes: Self.prefixes, batch: 10) == 100)
            let fetched = try connection.query("""
                SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'pushd.jobs'::regclass
                """).require(Int.self, row: 0, column: 0)
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs WHERE run_at <= now()").require(Int.self, row: 0, column: 0) == 100)
            _ = try connection.execute(script: "ROLLBACK")
            #expect(fetched < 3 * 2100, "11 batches of 10 fetched \(fetched) rows of 2,100 from the index")
        }
    }

    /// The same for parked campaign targets (`CampaignStore.makeParkedDue`).
    @Test func makingOneEnvironmentsParkedTargetsDueInBatchesReadsTheOtherEnvironmentsTargetsOnce() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let campaign = try connection.query("INSERT INTO pushd.campaigns (app, name, status) VALUES ('shop', 'sale', 'running') RETURNING id")
                .require(Int64.self, row: 0, column: 0)
            // 2,000 targets sent to sandbox due sooner than 100 sent to production.
            try connection.query("""
                INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error, environment)
                SELECT $1, g / 1000, g % 1000, repeat(lpad(to_hex(g), 16, '0'), 4), now() + interval '1 minute' + g * interval '1 millisecond',
                       1, now(), 'HTTP 503 ServiceUnavailable', CASE WHEN g <= 2000 THEN 'sandbox' ELSE 'production' END
                FROM generate_series(1, 2100) g
                """, [campaign])
            _ = try connection.execute(script: "ANALYZE pushd.campaign_retries")
            _ = try connection.execute(script: "BEGIN; SET LOCAL enable_seqscan = off")
            let production = OutageEnvironment(name: "production", home: ["shop": "production"])
            #expect(try CampaignStore().makeParkedDue(connection, app: "shop", environment: production, errorPrefixes: Self.prefixes, batch: 10) == 100)
            let fetched = try connection.query("""
                SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'pushd.campaign_retries'::regclass
                """).require(Int.self, row: 0, column: 0)
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_retries WHERE due_at <= now()").require(Int.self, row: 0, column: 0) == 100)
            _ = try connection.execute(script: "ROLLBACK")
            #expect(fetched < 3 * 2100, "11 batches of 10 fetched \(fetched) rows of 2,100 from the index")
        }
    }

    /// Production and sandbox fail apart: an outage of one makes only the jobs going there due,
    /// where a job goes as the sender resolves it (its own environment, else its token's
    /// registered one, else its app's).
    @Test func onlyTheJobsGoingToTheEnvironmentThatWasDownAreMadeDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try TokenStore().register(connection, app: "shop", token: Fixtures.token(3), environment: "sandbox")
            try TokenStore().register(connection, app: "shop", token: Fixtures.token(4), environment: "production")
            // Token 5 of shop and token 6 of news are not registered: they go to their app's environment.
            let rows: [(app: String, token: Int, environment: String?, seconds: Int)] = [
                ("shop", 1, "sandbox", 100), ("shop", 2, "production", 50), ("shop", 3, nil, 200),
                ("shop", 4, nil, 30), ("shop", 5, nil, 20), ("news", 6, nil, 10),
            ]
            for row in rows {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, environment, run_at, last_error)
                    VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), 'HTTP 503 ServiceUnavailable')
                    """, [row.app, Fixtures.token(row.token), Fixtures.payload, row.environment, row.seconds])
            }
            let home = ["shop": "production", "news": "sandbox"]
            let sandbox = OutageEnvironment(name: "sandbox", home: home)
            let production = OutageEnvironment(name: "production", home: home)
            let queue = JobQueue()
            let due = "SELECT coalesce(array_agg(device_token ORDER BY device_token), '{}') FROM pushd.jobs WHERE run_at <= now()"
            func tokens(_ seeds: [Int]) -> [String] { seeds.map { Fixtures.token($0) }.sorted() }
            #expect(try queue.makeSoonestDue(connection, apps: ["news", "shop"], environment: sandbox, errorPrefixes: Self.prefixes) == 2)
            #expect(try connection.query(due).require([String].self, row: 0, column: 0) == tokens([1, 6]))
            #expect(try queue.makeDue(connection, app: "shop", environment: sandbox, errorPrefixes: Self.prefixes) == 1)
            #expect(try connection.query(due).require([String].self, row: 0, column: 0) == tokens([1, 3, 6]))
            #expect(try queue.makeSoonestDue(connection, apps: ["shop"], environment: production, errorPrefixes: Self.prefixes) == 1)
            #expect(try connection.query(due).require([String].self, row: 0, column: 0) == tokens([1, 3, 5, 6]))
            #expect(try queue.makeDue(connection, app: "shop", environment: production, errorPrefixes: Self.prefixes) == 2)
            #expect(try connection.query(due).require([String].self, row: 0, column: 0) == tokens([1, 2, 3, 4, 5, 6]))
        }
    }

    /// A parked campaign target goes where it was sent, else where its campaign goes, else to its app's environment.
    @Test func onlyTheParkedTargetsGoingToTheEnvironmentThatWasDownAreMadeDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let sandboxCampaign = try connection.query("""
                INSERT INTO pushd.campaigns (app, name, status, environment) VALUES ('shop', 'beta', 'running', 'sandbox') RETURNING id
                """).require(Int64.self, row: 0, column: 0)
            let ownCampaign = try connection.query("INSERT INTO pushd.campaigns (app, name, status) VALUES ('shop', 'sale', 'running') RETURNING id")
                .require(Int64.self, row: 0, column: 0)
            let parked: [(Int64, String?)] = [(sandboxCampaign, nil), (sandboxCampaign, "production"), (ownCampaign, nil), (ownCampaign, "sandbox")]
            for (position, target) in parked.enumerated() {
                try connection.query("""
                    INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error, environment)
                    VALUES ($1, 0, $2::int, $3, now() + make_interval(secs => 100 + $2::int), 1, now(), 'HTTP 503 ServiceUnavailable', $4)
                    """, [target.0, position, Fixtures.token(position + 1), target.1])
            }
            let home = ["shop": "production"]
            let store = CampaignStore()
            let due = "SELECT coalesce(array_agg(position ORDER BY position), '{}') FROM pushd.campaign_retries WHERE due_at <= now()"
            #expect(try store.makeSoonestParkedDue(connection, apps: ["shop"], environment: OutageEnvironment(name: "sandbox", home: home),
                                                   errorPrefixes: Self.prefixes) == 1)
            #expect(try connection.query(due).require([Int32].self, row: 0, column: 0) == [0])
            #expect(try store.makeParkedDue(connection, app: "shop", environment: OutageEnvironment(name: "sandbox", home: home),
                                            errorPrefixes: Self.prefixes) == 1)
            #expect(try connection.query(due).require([Int32].self, row: 0, column: 0) == [0, 3])
            #expect(try store.makeParkedDue(connection, app: "shop", environment: OutageEnvironment(name: "production", home: home),
                                            errorPrefixes: Self.prefixes) == 2)
            #expect(try connection.query(due).require([Int32].self, row: 0, column: 0) == [0, 1, 2, 3])
        }
    }

    /// A broadcast goes to its own environment, else its channel's, else its app's; a channel
    /// request to its own, else its app's.
    @Test func onlyTheBroadcastsAndChannelRequestsGoingToTheEnvironmentThatWasDownAreMadeDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            for environment in ["sandbox", nil] {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority, environment) VALUES ('shop', $1, $2, 5, $3)",
                                     [BroadcastStoreTests.channel, BroadcastStoreTests.update, environment])
                try connection.query("SELECT pushd.create_channel('shop', 'none', $1)", [environment])
            }
            try connection.query("""
                UPDATE pushd.broadcast_jobs SET last_error = 'HTTP 503 ServiceUnavailable', run_at = now() + interval '100 seconds'
                """)
            try connection.query("UPDATE pushd.channels SET outcome = 'HTTP 503 ServiceUnavailable', run_at = now() + interval '100 seconds'")
            let home = ["shop": "production"]
            let sandbox = OutageEnvironment(name: "sandbox", home: home)
            let production = OutageEnvironment(name: "production", home: home)
            let broadcasts = BroadcastQueue()
            let channels = ChannelStore()
            func due(_ table: String) throws -> [String] {
                try connection.query("""
                    SELECT coalesce(array_agg(coalesce(environment, 'none') ORDER BY id), '{}') FROM pushd.\(table) WHERE run_at <= now()
                    """).require([String].self, row: 0, column: 0)
            }
            #expect(try broadcasts.makeSoonestDue(connection, apps: ["shop"], environment: sandbox, errorPrefixes: Self.prefixes) == 1)
            #expect(try broadcasts.makeSoonestDue(connection, apps: ["shop"], environment: sandbox, errorPrefixes: Self.prefixes) == 0)
            #expect(try due("broadcast_jobs") == ["sandbox"])
            #expect(try broadcasts.makeDue(connection, app: "shop", environment: production, errorPrefixes: Self.prefixes) == 1)
            #expect(try due("broadcast_jobs") == ["sandbox", "none"])
            #expect(try channels.makeSoonestDue(connection, apps: ["shop"], environment: production, outcomePrefixes: Self.prefixes) == 1)
            #expect(try due("channels") == ["none"])
            #expect(try channels.makeDue(connection, app: "shop", environment: production, outcomePrefixes: Self.prefixes) == 0)
            #expect(try channels.makeDue(connection, app: "shop", environment: sandbox, outcomePrefixes: Self.prefixes) == 1)
            #expect(try due("channels") == ["sandbox", "none"])
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
