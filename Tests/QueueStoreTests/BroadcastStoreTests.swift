import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// The SQL API of broadcast channels and broadcast jobs, against a real PostgreSQL.
@Suite struct BroadcastStoreTests {
    static let channel = "c2hvcDoxOjEyMzQ="
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#

    @Test func aJobWithAChannelIdIsABroadcastAndLeavesTheDeviceLaneAlone() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [Self.channel, Self.update])
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 0)
            let claimed = try BroadcastQueue().claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60)
            #expect(claimed.count == 1)
            #expect(claimed.first?.channelID == Self.channel)
            #expect(claimed.first?.priority == 5)
            #expect(try BroadcastQueue().claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).isEmpty, "leased")
            try BroadcastQueue().dead(connection, id: claimed[0].id, status: 404, reason: "ChannelNotRegistered")
            let dead = try connection.query("SELECT channel_id, device_token IS NULL, push_type, reason FROM pushd.dead_jobs")
            #expect(try dead.require(String.self, row: 0, column: 0) == Self.channel)
            #expect(try dead.require(Bool.self, row: 0, column: 1))
            #expect(try dead.require(String.self, row: 0, column: 2) == "liveactivity")
            #expect(try dead.require(String.self, row: 0, column: 3) == "ChannelNotRegistered")
        }
    }

    /// An instance that leaves an app's sandbox to another instance claims none of the app's
    /// broadcasts that go there (the job's environment, else its channel's, else the app's own)
    /// and does not count them as due; those of its other apps and environments it claims.
    @Test func aClaimLeavingAnEnvironmentTakesNoneOfItsBroadcasts() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let sandboxChannel = "c2FuZGJveDoxOjEyMzQ="
            try connection.query("INSERT INTO pushd.channels (app, channel_id, environment, storage_policy, state) VALUES ('shop', $1, 'sandbox', 'none', 'active')",
                                 [sandboxChannel])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, environment) VALUES ('shop', $1, $2, 'sandbox')", [Self.channel, Self.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [sandboxChannel, Self.update])
            let broadcasts = BroadcastQueue()
            let leaving = JobQueue.Leaving(environments: ["shop": "sandbox"], home: ["shop": "production", "cafe": "sandbox"])
            #expect(try broadcasts.claim(connection, limit: 10, apps: ["shop", "cafe"], leaving: leaving, leaseSeconds: 60).isEmpty)
            #expect(try !broadcasts.hasDue(connection, apps: ["shop", "cafe"], leaving: leaving))
            #expect(try broadcasts.hasDue(connection, apps: ["shop", "cafe"]))

            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, environment) VALUES ('shop', $1, $2, 'production')", [sandboxChannel, Self.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [Self.channel, Self.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('cafe', $1, $2)", [Self.channel, Self.update])
            #expect(try broadcasts.hasDue(connection, apps: ["shop", "cafe"], leaving: leaving))
            let claimed = try broadcasts.claim(connection, limit: 10, apps: ["shop", "cafe"], leaving: leaving, leaseSeconds: 60)
            #expect(claimed.map { "\($0.app) \($0.environment ?? "home")" }.sorted() == ["cafe home", "shop home", "shop production"])
            #expect(try connection.query("SELECT count(*) FROM pushd.broadcast_jobs WHERE leased_until IS NULL AND last_error IS NULL")
                .require(Int.self, row: 0, column: 0) == 2)
            // Without anything left, every broadcast is claimed.
            #expect(try broadcasts.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).count == 2)
        }
    }

    /// A channel request going to an environment the instance leaves to another one (its
    /// channel's environment, else the app's) is neither claimed nor counted as due: claimed,
    /// it would only be put back, 5 s later each time this instance won it.
    @Test func aClaimLeavingAnEnvironmentTakesNoneOfItsChannelRequests() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let channels = ChannelStore(), broadcasts = BroadcastQueue()
            try connection.query("SELECT pushd.create_channel('shop', 'none', 'sandbox')")
            let leaving = JobQueue.Leaving(environments: ["shop": "sandbox", "cafe": "production"],
                                           home: ["shop": "production", "cafe": "production"])
            #expect(try channels.claim(connection, limit: 10, apps: ["shop", "cafe"], leaving: leaving, leaseSeconds: 60).isEmpty)
            #expect(try !broadcasts.hasDue(connection, apps: ["shop", "cafe"], leaving: leaving))
            #expect(try broadcasts.hasDue(connection, apps: ["shop", "cafe"]))

            // One to the environment it keeps, and one of an app going to its home, which it leaves.
            try connection.query("SELECT pushd.create_channel('shop', 'none', 'production')")
            try connection.query("SELECT pushd.create_channel('cafe', 'none')")
            #expect(try broadcasts.hasDue(connection, apps: ["shop", "cafe"], leaving: leaving))
            let claimed = try channels.claim(connection, limit: 10, apps: ["shop", "cafe"], leaving: leaving, leaseSeconds: 60)
            #expect(claimed.map { "\($0.app) \($0.environment ?? "home")" } == ["shop production"])
            // Without anything left, the rest is claimed.
            #expect(try channels.claim(connection, limit: 10, apps: ["shop", "cafe"], leaseSeconds: 60).count == 2)
        }
    }

    /// A claim says when the row it takes was left unsettled by an earlier claim (its lease
    /// ended with no outcome recorded); a row put back with an outcome, or never claimed, is not.
    @Test func aClaimSaysWhenItTakesOverALeaseThatEndedUnsettled() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let broadcasts = BroadcastQueue(), channels = ChannelStore()
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [Self.channel, Self.update])
            let request = try connection.query("SELECT pushd.create_channel('shop', 'none')").require(Int64.self, row: 0, column: 0)
            let first = try #require(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.3).first)
            let firstRequest = try #require(try channels.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.3).first)
            #expect(first.unsettledLeaseEndedAt == nil && firstRequest.unsettledLeaseEndedAt == nil)
            Thread.sleep(forTimeInterval: 0.5)
            let taken = try #require(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.3).first)
            let takenRequest = try #require(try channels.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.3).first)
            #expect(taken.id == first.id && taken.unsettledLeaseEndedAt != nil)
            #expect(takenRequest.id == request && takenRequest.unsettledLeaseEndedAt != nil)
            // Put back with an outcome: the next claim takes over nothing.
            try broadcasts.retry(connection, id: taken.id, runAt: Timestamp(), error: "HTTP 503", countsAsAttempt: false)
            try channels.recordRetry(connection, id: request, runAt: Timestamp(), outcome: "HTTP 503", countsAsAttempt: false)
            #expect(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60).first?.unsettledLeaseEndedAt == nil)
            #expect(try channels.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60).first?.unsettledLeaseEndedAt == nil)
        }
    }

    /// A claim whose answer was lost is given back by its claimer's name: the rows it took
    /// are due at once, a row it took over from a lease that ran out unsettled gets that lease
    /// back (so the next claim still says it may have reached APNs), and rows with an outcome
    /// recorded since, another claimer's, one it sent and could not record, or a channel whose
    /// request was carried out, are left.
    @Test func aClaimWhoseAnswerWasLostIsGivenBackByItsClaimersName() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let broadcasts = BroadcastQueue(), channels = ChannelStore()
            func insertBroadcast() throws {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [Self.channel, Self.update])
            }
            // A free job claimed by "a": given back, due, with no takeover to report.
            try insertBroadcast()
            let free = try #require(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60, owner: "a").first)
            #expect(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60, owner: "a").isEmpty)
            // One the claimer sent and could not record is left to its lease.
            #expect(try broadcasts.giveBackClaims(connection, owner: "a", excluding: [free.id]).isEmpty)
            let back = try broadcasts.giveBackClaims(connection, owner: "a")
            #expect(back.map(\.id) == [free.id] && back.first?.replacedUntil == nil, "\(back)")
            #expect(try broadcasts.giveBackClaims(connection, owner: "a").isEmpty)
            let again = try #require(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 0.3, owner: "b").first)
            #expect(again.id == free.id && again.unsettledLeaseEndedAt == nil)
            // "b"'s lease runs out unsettled; "a" takes it over and gives it back: the lease is
            // put back, and the next claim reports the takeover of it.
            Thread.sleep(forTimeInterval: 0.5)
            let taken = try #require(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60, owner: "a").first)
            let ended = try #require(taken.unsettledLeaseEndedAt)
            #expect(try broadcasts.giveBackClaims(connection, owner: "b").isEmpty, "not b's any more")
            let putBack = try broadcasts.giveBackClaims(connection, owner: "a")
            #expect(putBack.count == 1 && putBack.first?.replacedUntil != nil, "\(putBack)")
            let next = try #require(try broadcasts.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60, owner: "c").first)
            #expect(next.id == free.id)
            #expect(next.unsettledLeaseEndedAt.map { abs($0.timeIntervalSince(ended)) < 0.001 } == true, "\(String(describing: next.unsettledLeaseEndedAt)) vs \(ended)")
            // Put back with an outcome since its claim: not given back.
            try broadcasts.retry(connection, id: next.id, runAt: Timestamp().addingTimeInterval(60), error: "HTTP 503", countsAsAttempt: false)
            #expect(try broadcasts.giveBackClaims(connection, owner: "c").isEmpty)

            // Channel requests alike; a create carried out since its claim is left alone.
            let request = try connection.query("SELECT pushd.create_channel('shop', 'none')").require(Int64.self, row: 0, column: 0)
            let claimed = try #require(try channels.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60, owner: "a").first)
            #expect(claimed.id == request)
            let requestBack = try channels.giveBackClaims(connection, owner: "a")
            #expect(requestBack.map(\.id) == [request] && requestBack.first?.replacedUntil == nil, "\(requestBack)")
            let carried = try #require(try channels.claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60, owner: "a").first)
            #expect(carried.id == request && carried.unsettledLeaseEndedAt == nil)
            try channels.recordCreated(connection, id: request, channelID: Self.channel, environment: "sandbox", outcome: "created")
            #expect(try channels.giveBackClaims(connection, owner: "a").isEmpty)
            // Its deletion asked for at once: not what a claim of "a" took either.
            try connection.query("SELECT pushd.delete_channel('shop', $1)", [Self.channel])
            #expect(try channels.giveBackClaims(connection, owner: "a").isEmpty)
        }
    }

    @Test func badBroadcastRowsAreRefusedSayingWhatIsWrong() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let cases: [(String, [any PGParameter], String)] = [
                ("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', 'not base64!', $1)", [Self.update],
                 "pushd.jobs.channel_id must be the base64 channel id"),
                ("INSERT INTO pushd.jobs (app, channel_id, device_token, payload) VALUES ('shop', $1, $2, $3)",
                 [Self.channel, String(repeating: "ab", count: 32), Self.update], "a job goes to one device or to one channel"),
                ("INSERT INTO pushd.jobs (app, channel_id, payload, push_type) VALUES ('shop', $1, $2, 'background')",
                 [Self.channel, Self.update], "must be liveactivity for a broadcast"),
                ("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, '[1]')", [Self.channel],
                 "pushd.jobs.payload must be a JSON object"),
                ("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)",
                 [Self.channel, #"{"aps":{"timestamp":"now","event":"end"}}"#],
                 #"pushd.jobs.payload must have "aps"."timestamp" as a non-negative integer (epoch seconds), got "now""#),
                ("INSERT INTO pushd.jobs (app, channel_id, payload, expiration) VALUES ('shop', $1, $2, '1969-12-31 23:00:00+00')",
                 [Self.channel, Self.update],
                 "pushd.jobs.expiration must not be before 1970-01-01 00:00:00 UTC (APNs takes epoch seconds, 0 or more)"),
                // The row was written to pushd.jobs: no refusal names pushd.broadcast_jobs.
                ("INSERT INTO pushd.jobs (channel_id, payload) VALUES ($1, $2)", [Self.channel, Self.update],
                 "pushd.jobs.app is required"),
                ("INSERT INTO pushd.jobs (app, payload) VALUES ('shop', $1)", [Self.update],
                 "pushd.jobs.device_token is required (or channel_id, for a broadcast)"),
            ]
            for (sql, parameters, message) in cases {
                let error = Fixtures.pgError { try connection.query(sql, parameters) }
                #expect(error?.description.contains(message) == true, "\(sql): \(String(describing: error))")
                #expect(error?.description.contains("broadcast_jobs") == false, "\(sql): \(String(describing: error))")
            }
            #expect(try connection.query("SELECT count(*) FROM pushd.broadcast_jobs").require(Int.self, row: 0, column: 0) == 0)
        }
    }

    /// Apple refuses these broadcasts whatever the moment: a nonzero expiration on a channel
    /// created with storage policy none, priority 1 (ActivityKit takes 10 or 5), and a start
    /// event (a broadcast cannot start a Live Activity). The INSERT says so, naming pushd.jobs.
    @Test func broadcastsApnsRefusesForTheirChannelPriorityOrEventAreRefusedAtInsert() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let stored = "c3RvcmVkOjE6MTIzNA=="
            try connection.query("""
                INSERT INTO pushd.channels (app, channel_id, storage_policy, state)
                VALUES ('shop', $1, 'none', 'active'), ('shop', $2, 'most-recent', 'active')
                """, [Self.channel, stored])
            let start = #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A","attributes":{},"alert":"go"}}"#
            let cases: [(String, [any PGParameter], String)] = [
                ("INSERT INTO pushd.jobs (app, channel_id, payload, expiration) VALUES ('shop', $1, $2, '2030-01-01 00:00:00+00')",
                 [Self.channel, Self.update],
                 "pushd.jobs.expiration must be NULL or 1970-01-01 00:00:00 UTC (apns-expiration 0): channel \(Self.channel) was created with storage policy none"),
                ("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 1)", [Self.channel, Self.update],
                 "pushd.jobs.priority must be 10 or 5 for a broadcast (ActivityKit takes no other), got 1"),
                ("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [stored, start],
                 #"pushd.jobs.payload must not have "aps"."event" "start": a broadcast cannot start a Live Activity"#),
            ]
            for (sql, parameters, message) in cases {
                let error = Fixtures.pgError { try connection.query(sql, parameters) }
                #expect(error?.description.contains(message) == true, "\(sql): \(String(describing: error))")
            }
            #expect(try connection.query("SELECT count(*) FROM pushd.broadcast_jobs").require(Int.self, row: 0, column: 0) == 0)
            // What Apple takes: 0 (or no expiration) on a channel that stores nothing, any on one that stores.
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, expiration) VALUES ('shop', $1, $2, '1970-01-01 00:00:00+00')",
                                 [Self.channel, Self.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)", [Self.channel, Self.update])
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, expiration) VALUES ('shop', $1, $2, '2030-01-01 00:00:00+00')",
                                 [stored, Self.update])
            #expect(try connection.query("SELECT count(*) FROM pushd.broadcast_jobs").require(Int.self, row: 0, column: 0) == 3)
        }
    }

    /// Apple: a broadcast payload "is limited to a maximum size of 5 KB (5,120 bytes)", not the
    /// 4096 of a Live Activity push to one device.
    @Test func broadcastPayloadsMayHave5120BytesAtInsert() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            func payload(_ size: Int) -> String {
                let head = #"{"aps":{"timestamp":1,"event":"end"},"x":""#
                return head + String(repeating: "a", count: size - head.utf8.count - 2) + #""}"#
            }
            let insert = "INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)"
            let error = Fixtures.pgError { try connection.query(insert, [Self.channel, payload(5121)]) }
            #expect(error?.message.hasPrefix("pushd.jobs.payload is 5121 bytes; broadcast payloads may have at most 5120") == true,
                    "\(String(describing: error))")
            try connection.query(insert, [Self.channel, payload(5120)])
            #expect(try connection.query("SELECT octet_length(payload) FROM pushd.broadcast_jobs").require(Int.self, row: 0, column: 0) == 5120)
        }
    }

    /// A broadcast or channel request being sent is not made due by a statement that makes
    /// waiting ones due (a hold ending, APNs answering again after an outage): another instance
    /// would claim and send it a second time. Put back for a retry, it is made due again.
    @Test func rowsBeingSentAreNotMadeDueAgainWhileTheirLeaseLasts() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let queue = BroadcastQueue()
            let channels = ChannelStore()
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [Self.channel, Self.update])
            let channel = try connection.query("SELECT pushd.create_channel('shop', 'none')").require(Int64.self, row: 0, column: 0)
            // Both were held once, and are sent again: a claim leases them.
            try connection.query("UPDATE pushd.broadcast_jobs SET last_error = $1", [HeldWork.errorPrefix + "FeatureNotEnabled"])
            try connection.query("UPDATE pushd.channels SET outcome = $1", [HeldWork.errorPrefix + "CannotCreateChannelConfig"])
            let broadcast = try #require(try queue.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).first)
            #expect(try channels.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).map(\.id) == [channel])

            #expect(try HeldWork().release(connection, app: "shop") == 0)
            try connection.query("UPDATE pushd.broadcast_jobs SET last_error = 'HTTP 503 ServiceUnavailable'")
            #expect(try queue.makeDue(connection, app: "shop", errorPrefixes: ["HTTP 5"]) == 0)
            try connection.query("UPDATE pushd.channels SET outcome = 'HTTP 503 ServiceUnavailable'")
            #expect(try channels.makeDue(connection, app: "shop", outcomePrefixes: ["HTTP 5"]) == 0)
            #expect(try queue.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).isEmpty, "claimed while in flight")
            #expect(try channels.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).isEmpty, "claimed while in flight")

            // Put back for a retry, they wait; making them due works again.
            try queue.retry(connection, id: broadcast.id, runAt: Timestamp().addingTimeInterval(300),
                            error: "HTTP 503 ServiceUnavailable", countsAsAttempt: false)
            try channels.recordRetry(connection, id: channel, runAt: Timestamp().addingTimeInterval(300),
                                     outcome: HeldWork.errorPrefix + "CannotCreateChannelConfig", countsAsAttempt: false)
            #expect(try queue.makeDue(connection, app: "shop", errorPrefixes: ["HTTP 5"]) == 1)
            #expect(try HeldWork().release(connection, app: "shop") == 1)
            try channels.recordRetry(connection, id: channel, runAt: Timestamp().addingTimeInterval(300),
                                     outcome: "transport: Connection refused", countsAsAttempt: false)
            #expect(try channels.makeDue(connection, app: "shop", outcomePrefixes: ["HTTP 5"]) == 0)
            #expect(try channels.makeDue(connection, app: "shop", outcomePrefixes: ["HTTP 5", "transport: "]) == 1)
            #expect(try queue.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).map(\.id) == [broadcast.id])
            #expect(try channels.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60).map(\.id) == [channel])
        }
    }

    @Test func createAndDeleteChannelQueueOperationsThatRecordTheirOutcome() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let store = ChannelStore()
            let id = try connection.query("SELECT pushd.create_channel('shop', 'most-recent')").require(Int64.self, row: 0, column: 0)
            let pending = try store.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60)
            #expect(pending.map(\.kind) == [.create])
            #expect(pending.first?.storagePolicy == "most-recent")
            try store.recordCreated(connection, id: id, channelID: Self.channel, environment: "sandbox")
            let active = try #require(try store.row(connection, id: id))
            #expect(active.state == "active")
            #expect(active.channelID == Self.channel)
            #expect(active.createdAt != nil)

            #expect(try connection.query("SELECT pushd.delete_channel('shop', $1)", [Self.channel]).require(Int64.self, row: 0, column: 0) == id)
            let deletion = try store.claim(connection, limit: 10, apps: ["shop"], leaseSeconds: 60)
            #expect(deletion.map(\.kind) == [.delete])
            #expect(deletion.first?.channelID == Self.channel)
            try store.recordDeleted(connection, id: id, environment: "sandbox", outcome: "deleted")
            #expect(try store.row(connection, id: id)?.state == "deleted")
            #expect(try store.list(connection, app: "shop").isEmpty)

            let bad = Fixtures.pgError { try connection.query("SELECT pushd.create_channel('shop', 'forever')") }
            #expect(bad?.description.contains("pushd.channels.storage_policy must be none or most-recent") == true)
        }
    }

    @Test func theEnqueueRoleBroadcastsAndAsksForChannelsButReadsNone() throws {
        try IsolatedDatabase.with { database in
            try LoginRole.with(memberOf: "pushd_enqueue", in: database) { role in
                let app = try role.connect()
                defer { app.close() }
                try app.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [Self.channel, Self.update])
                try app.query("SELECT pushd.create_channel('shop')")
                try app.query("SELECT pushd.delete_channel('shop', $1)", [Self.channel])
                for sql in ["SELECT * FROM pushd.channels", "SELECT * FROM pushd.broadcast_jobs", "DELETE FROM pushd.broadcast_jobs",
                            "UPDATE pushd.channels SET state = 'active'"] {
                    #expect(RoleTests.denied(app, sql), "pushd_enqueue may run: \(sql)")
                }
            }
            let owner = try database.connect()
            defer { owner.close() }
            #expect(try owner.query("SELECT count(*) FROM pushd.broadcast_jobs").require(Int.self, row: 0, column: 0) == 1)
            #expect(try owner.query("SELECT count(*) FROM pushd.channels").require(Int.self, row: 0, column: 0) == 2)
        }
    }

    @Test func queuedBroadcastsAreALaneOfTheQueueStatistics() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            for _ in 0..<2 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('news', $1, $2)", [Self.channel, Self.update])
            }
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, run_at) VALUES ('news', $1, $2, now() + interval '1 hour')",
                                 [Self.channel, Self.update])
            let lanes = try QueueStats.read(connection).lanes.filter { $0.lane == .broadcast }
            #expect(lanes.map(\.app) == ["news"])
            #expect(lanes.first?.depth == 2)
            #expect(lanes.first?.scheduled == 1)
        }
    }
}
