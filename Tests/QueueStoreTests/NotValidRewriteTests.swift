import Posix
import PushdTestSupport
import QueueStore
import Testing

/// An operator may add a CHECK to a pushd table NOT VALID (to refuse oversize payloads from now
/// on, say): PostgreSQL leaves the rows already there alone until they are written again, and
/// checks every row an UPDATE writes. Every statement pushd runs that writes many waiting rows
/// at once (made due after a pause, a hold or an outage, put back for a held topic, a broadcast
/// claim) must not fail as a whole, turn after turn, for one old row: that row goes to dead
/// letters saying which check refused it, and the others are written.
@Suite struct NotValidRewriteTests {
    static let big = #"{"aps":{"alert":{"title":"Shipped","body":"\#(String(repeating: "x", count: 120))"}}}"#

    /// `count` jobs of `app` waiting with `error`, `runAt` from now, and before them one with a
    /// payload over 100 bytes; then the check refusing such payloads, added NOT VALID. Returns
    /// the old job's id.
    func queueWithAnOldJob(_ connection: PGConnection, count: Int, app: String = "shop", error: String?,
                           runAt: String = "30 seconds", pushType: String = "alert") throws -> Int64 {
        let old = try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, payload, push_type, run_at, last_error)
            VALUES ($1, $2, $3, $4, now() + $5::interval, $6) RETURNING id
            """, [app, Fixtures.token(900), Self.big, pushType, runAt, error]).require(Int64.self, row: 0, column: 0)
        try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, payload, push_type, run_at, last_error)
            SELECT $1, repeat(lpad(to_hex(g), 16, '0'), 4), $2, $3, now() + $4::interval + g * interval '1 millisecond', $5
            FROM generate_series(1, $6::integer) g
            """, [app, Fixtures.payload, pushType, runAt, error, count])
        try Self.addCheck(connection, table: "jobs")
        return old
    }

    static func addCheck(_ connection: PGConnection, table: String) throws {
        _ = try connection.execute(script: """
            ALTER TABLE pushd.\(table) ADD CONSTRAINT \(table)_payload_small CHECK (octet_length(payload) <= 100) NOT VALID
            """)
    }

    func dead(_ connection: PGConnection) throws -> [(id: Int64, reason: String)] {
        let rows = try connection.query("SELECT id, reason FROM pushd.dead_jobs ORDER BY id")
        return try (0..<rows.rowCount).map { (try rows.require(Int64.self, row: $0, column: 0), try rows.require(String.self, row: $0, column: 1)) }
    }

    func waiting(_ connection: PGConnection) throws -> Int {
        try connection.query("SELECT count(*) FROM pushd.jobs WHERE run_at > now()").require(Int.self, row: 0, column: 0)
    }

    @Test func aResumedAppsPausedWorkIsDueAndAnOldJobTheCheckRefusesIsDeadLettered() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let old = try queueWithAnOldJob(connection, count: 7, error: "app paused: InvalidProviderToken")
            var reported = [RefusedRewrite]()
            #expect(try HeldWork().releasePaused(connection, app: "shop", batch: 3, onRefused: { reported += $0 }) == 7)
            #expect(reported.map(\.id) == [old], "the refused job is reported, for the daemon to count and log")
            #expect(reported.first?.check == "jobs_payload_small" && reported.first?.table == "pushd.jobs" && reported.first?.app == "shop")
            #expect(try waiting(connection) == 0)
            let dead = try dead(connection)
            #expect(dead.map(\.id) == [old])
            #expect(dead.first?.reason.contains("could not be made due again (app paused: InvalidProviderToken)") == true, "\(dead)")
            #expect(dead.first?.reason.contains("CHECK jobs_payload_small") == true, "\(dead)")
        }
    }

    @Test func outageRecoveryMakesTheRestDueAndDeadLettersAnOldJobTheCheckRefuses() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let old = try queueWithAnOldJob(connection, count: 4, error: "HTTP 503 ServiceUnavailable")
            let production = OutageEnvironment(name: "production", home: ["shop": "production"])
            #expect(try JobQueue().makeDue(connection, app: "shop", environment: production, errorPrefixes: ["HTTP 503"], batch: 10) == 4)
            #expect(try waiting(connection) == 0)
            #expect(try dead(connection).map(\.id) == [old])
        }
    }

    /// The probe during an outage makes the soonest waiting job of each app due; the old one is
    /// the soonest: it goes to dead letters, and the app's probe takes the next one.
    @Test func theOutageProbePassesOverAnOldJobTheCheckRefuses() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let old = try queueWithAnOldJob(connection, count: 2, error: "HTTP 503 ServiceUnavailable")
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at, last_error)
                VALUES ('blog', $1, $2, now() + interval '30 seconds', 'HTTP 503 ServiceUnavailable')
                """, [Fixtures.token(901), Fixtures.payload])
            let production = OutageEnvironment(name: "production", home: ["shop": "production", "blog": "production"])
            #expect(try JobQueue().makeSoonestDue(connection, apps: ["shop", "blog"], environment: production,
                                                  errorPrefixes: ["HTTP 503"]) == 2)
            #expect(try waiting(connection) == 1)
            #expect(try dead(connection).map(\.id) == [old])
        }
    }

    /// A hold that ended (`HeldWork.release`) makes the held jobs due in one statement.
    @Test func aHoldThatEndedMakesItsJobsDueAndDeadLettersAnOldJobTheCheckRefuses() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let old = try queueWithAnOldJob(connection, count: 3, error: "sending held: TopicDisallowed")
            #expect(try HeldWork().release(connection, app: "shop") == 3)
            #expect(try waiting(connection) == 0)
            let dead = try dead(connection)
            #expect(dead.map(\.id) == [old])
            #expect(dead.first?.reason.contains("could not be made due again (sending held: TopicDisallowed)") == true, "\(dead)")
        }
    }

    /// The sweep of a held topic puts its due jobs back until the hold ends, a set at a time.
    @Test func aHeldTopicsSweepPutsTheRestBackAndDeadLettersAnOldJobTheCheckRefuses() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let old = try queueWithAnOldJob(connection, count: 5, error: nil, runAt: "-1 minute")
            let until = Timestamp().addingTimeInterval(600)
            var put = 0
            for _ in 0..<4 {
                let count = try HeldWork().deferJobs(connection, app: "shop", pushTypes: ["alert"], environment: "production",
                                                     appEnvironment: "production", until: until, reason: "TopicDisallowed", limit: 4)
                put += count
                if count == 0 { break }
            }
            #expect(put == 5)
            #expect(try waiting(connection) == 5)
            let dead = try dead(connection)
            #expect(dead.map(\.id) == [old])
            #expect(dead.first?.reason.contains("could not be put back for its held topic") == true, "\(dead)")
        }
    }

    /// The broadcast claim is an UPDATE (the lease): one old broadcast the check refuses would
    /// stop every claim of the lane.
    @Test func theBroadcastClaimTakesTheRestAndDeadLettersAnOldBroadcastTheCheckRefuses() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#
            let bigUpdate = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"\#(String(repeating: "1", count: 100))"}}}"#
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 10)",
                                 [BroadcastStoreTests.channel, bigUpdate])
            let old = try connection.query("SELECT id FROM pushd.broadcast_jobs").require(Int64.self, row: 0, column: 0)
            for _ in 0..<3 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                     [BroadcastStoreTests.channel, update])
            }
            try Self.addCheck(connection, table: "broadcast_jobs")
            let claimed = try BroadcastQueue().claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60)
            #expect(claimed.count == 3)
            #expect(!claimed.map(\.id).contains(old))
            let dead = try dead(connection)
            #expect(dead.map(\.id) == [old])
            #expect(dead.first?.reason.contains("CHECK broadcast_jobs_payload_small") == true, "\(dead)")
        }
    }

    /// After an outage, broadcasts are made due again (`makeDue`), and during it one per app
    /// (`makeSoonestDue`, the probe); an old one the check refuses goes to dead letters.
    @Test func broadcastsAreMadeDueAfterAnOutageAndAnOldOneTheCheckRefusesIsDeadLettered() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#
            let bigUpdate = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"\#(String(repeating: "1", count: 100))"}}}"#
            for (index, payload) in [bigUpdate, update, update, bigUpdate, update].enumerated() {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 10)",
                                     [BroadcastStoreTests.channel, payload])
                try connection.query("""
                    UPDATE pushd.broadcast_jobs SET run_at = now() + make_interval(secs => 30 + $1::float8), last_error = 'HTTP 503 ServiceUnavailable'
                    WHERE id = (SELECT max(id) FROM pushd.broadcast_jobs)
                    """, [Double(index)])
            }
            try Self.addCheck(connection, table: "broadcast_jobs")
            let production = OutageEnvironment(name: "production", home: ["shop": "production"])
            // The soonest is an old one: dead-lettered; the probe finds the next one on its next turn.
            #expect(try BroadcastQueue().makeSoonestDue(connection, apps: ["shop"], environment: production, errorPrefixes: ["HTTP 503"]) == 0)
            #expect(try BroadcastQueue().makeSoonestDue(connection, apps: ["shop"], environment: production, errorPrefixes: ["HTTP 503"]) == 1)
            #expect(try BroadcastQueue().makeDue(connection, app: "shop", environment: production, errorPrefixes: ["HTTP 503"]) == 2)
            #expect(try connection.query("SELECT count(*) FROM pushd.broadcast_jobs WHERE run_at > now()").require(Int.self, row: 0, column: 0) == 0)
            let dead = try dead(connection)
            #expect(dead.count == 2)
            #expect(dead.allSatisfy { $0.reason.contains("could not be made due again (HTTP 503 ServiceUnavailable): CHECK broadcast_jobs_payload_small") },
                    "\(dead)")
        }
    }

    /// A batch's prunes run inside its claim's transaction: a token row a check refuses to
    /// write (here an operator's rule on user ids, which an old registration breaks) failed the
    /// prune, the transaction, and so the batch, which was claimed and sent again, delivered
    /// jobs included, on every turn. The token is left as it is, the rest are pruned, and the
    /// transaction can commit.
    @Test func aTokenPruneACheckRefusesLeavesTheRestPrunedAndTheBatchsTransactionWhole() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            for seed in 1...3 {
                try TokenStore().register(connection, app: "shop", token: Fixtures.token(seed), userID: seed == 2 ? "a-user-id-longer-than-ten" : "u\(seed)")
            }
            _ = try connection.execute(script: """
                ALTER TABLE pushd.device_tokens ADD CONSTRAINT device_tokens_user_id_short CHECK (length(user_id) <= 10) NOT VALID
                """)
            _ = try connection.execute(script: "BEGIN")
            let outcome = try TokenStore().prune(connection, (1...3).map {
                TokenPrune(app: "shop", token: Fixtures.token($0), reason: "BadDeviceToken", apnsTimestamp: nil)
            })
            _ = try connection.execute(script: "COMMIT")
            #expect(outcome.invalidated.map(\.token) == [Fixtures.token(1), Fixtures.token(3)])
            #expect(outcome.refused.map(\.prune.token) == [Fixtures.token(2)])
            #expect(outcome.refused.first?.check == "device_tokens_user_id_short")
            #expect(try connection.query("SELECT string_agg(user_id, ',' ORDER BY user_id) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL")
                        .require(String.self, row: 0, column: 0) == "u1,u3")
        }
    }
}
