import Posix

/// One broadcast job: a Live Activity update for every device subscribed to `channelID`.
public struct BroadcastJob: Sendable, Hashable {
    public var id: Int64
    public var app: String
    public var channelID: String
    public var payload: String
    public var priority: Int
    public var expiration: Timestamp?
    public var apnsID: APNsID?
    /// The job's own environment, else the one recorded for the channel in `pushd.channels`;
    /// nil: the app's configured environment.
    public var environment: String?
    public var attempts: Int
    public var createdAt: Timestamp
    /// When it was first sent, once a send has been retried; retry windows count from here.
    public var firstAttemptAt: Timestamp?
    /// The storage policy (`none`, `most-recent`) of the channel as recorded in
    /// `pushd.channels`; nil when the channel was not created through pushd.
    public var storagePolicy: String? = nil
    /// When an earlier claim's lease of this job ran out with no outcome recorded (its
    /// instance stopped, hung or lost the database while sending it): the job is taken over,
    /// and it may have reached APNs already. nil for a job no claim left unsettled.
    public var unsettledLeaseEndedAt: Timestamp? = nil
}

/// `pushd.broadcast_jobs`, filled by INSERTs into `pushd.jobs` that name a `channel_id`.
///
/// Claimed by lease rather than by an open transaction: a broadcast reaches many devices and
/// is rare, so the extra write per job costs nothing, and no connection is held while APNs
/// answers. A claimer that dies leaves its jobs due again after the lease.
public struct BroadcastQueue: Sendable {
    public static let channel = "pushd_broadcasts"

    public init() {}

    /// Takes up to `limit` due broadcast jobs of `apps` by leasing them for `leaseSeconds`.
    /// The lease is an UPDATE, which every CHECK of the table applies to: a job a check refuses
    /// to write (one added NOT VALID after it was queued) goes to dead letters (`RefusedRewrite`,
    /// given to `onRefused`) and the rest are claimed one by one, instead of every claim of the
    /// lane failing on it.
    ///
    /// `leaving` names, per app, the environment whose broadcasts this instance leaves to other
    /// instances (`JobQueue.Leaving.environments`: it has no credentials there and another live
    /// instance has): a broadcast going there (`destination`) is not claimed, so an instance
    /// that could only put it back neither delays nor rewrites it. A broadcast needs no token
    /// key, so `leaving`'s token-only apps do not matter here.
    ///
    /// `owner` names the claimer in the rows (`claimed_by`), so that a claim whose answer was
    /// lost can be given back (`giveBackClaims`).
    public func claim(_ connection: PGConnection, limit: Int, apps: [String], leaving: JobQueue.Leaving = JobQueue.Leaving(),
                      leaseSeconds: Double, owner: String? = nil, onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> [BroadcastJob] {
        guard limit > 0, !apps.isEmpty else { return [] }
        let leaves = !leaving.environments.isEmpty
        let due = leaves ? Self.dueLeavingSQL : Self.dueSQL
        let dueParameters: [any PGParameter] = leaves ? [limit, apps] + Self.leavingParameters(leaving, apps: apps) : [limit, apps]
        let result: [PGRow]
        do {
            result = try connection.query(connection.prepared(Self.claimSQL(rows: "b.id = ANY (ARRAY(\(due)))", lease: dueParameters.count + 1)),
                                          dueParameters + [leaseSeconds, owner]).rows
        } catch let error as PGError where error.code == .checkViolation {
            let ids = try connection.query(connection.prepared(due), dueParameters)
            let one = try connection.prepared(Self.claimSQL(rows: """
                b.id = (SELECT id FROM pushd.broadcast_jobs WHERE id = $1 AND run_at <= now() FOR UPDATE SKIP LOCKED)
                """, lease: 2))
            var rows = [PGRow]()
            var refused = [RefusedRewrite]()
            for index in 0..<ids.rowCount {
                let id = try ids.require(Int64.self, row: index, column: 0)
                do {
                    rows += try connection.query(one, [id, leaseSeconds, owner]).rows
                } catch let error as PGError where error.code == .checkViolation {
                    if let item = try deadLetterRefused(connection, id: id, doing: "claimed", error: error) { refused.append(item) }
                }
            }
            if !refused.isEmpty { onRefused(refused) }
            result = rows
        }
        return try result.map { row in
            BroadcastJob(id: try row.require(0), app: try row.require(1), channelID: try row.require(2), payload: try row.require(3),
                         priority: Int(try row.require(4) as Int16), expiration: try row.get(5), apnsID: try row.get(6),
                         environment: try row.get(7), attempts: Int(try row.require(8) as Int32), createdAt: try row.require(9),
                         firstAttemptAt: try row.get(10), storagePolicy: try row.get(11), unsettledLeaseEndedAt: try row.get(12))
        }
    }

    /// The due broadcast jobs of the apps `$2`, highest priority first, at most `$1`.
    static let dueSQL = "SELECT id FROM pushd.broadcast_jobs WHERE app = ANY ($2::text[]) AND run_at <= now() ORDER BY priority DESC, run_at LIMIT $1 FOR UPDATE SKIP LOCKED"

    /// `dueSQL` for an instance that leaves some environment of some apps to other instances:
    /// `$3` names per app of `$2` the environment it leaves (NULL: none), `$4` the app's own
    /// environment, where a broadcast goes that names none and whose channel has none recorded.
    static let dueLeavingSQL = """
        SELECT b.id FROM pushd.broadcast_jobs b
        JOIN unnest($2::text[], $3::text[], $4::text[]) AS a(app, leave, home) ON a.app = b.app
        WHERE b.run_at <= now() AND \(notLeft)
        ORDER BY b.priority DESC, b.run_at LIMIT $1 FOR UPDATE OF b SKIP LOCKED
        """

    /// A broadcast job `b` of app `a` does not go to the environment `a.leave`.
    static let notLeft = "(a.leave IS NULL OR \(destination(home: "a.home")) IS DISTINCT FROM a.leave)"

    /// The environment each of `apps` leaves (nil: none) and its own: `$3` and `$4` of `dueLeavingSQL`.
    static func leavingParameters(_ leaving: JobQueue.Leaving, apps: [String]) -> [any PGParameter] {
        [apps.map { leaving.environments[$0] }, apps.map { leaving.home[$0] ?? "" }]
    }

    /// The claim of the rows `rows` selects, leased for `$lease` seconds by `$(lease + 1)`.
    /// `leased_until` is cleared whenever an outcome is recorded, so one still set when the row
    /// is claimed again is a lease that ran out unsettled: the join returns it (`previous`, the
    /// row as it was before this claim), and the row keeps it (`replaced_until`) for a give-back.
    static func claimSQL(rows: String, lease: Int) -> String {
        """
        UPDATE pushd.broadcast_jobs b SET run_at = now() + make_interval(secs => $\(lease)), leased_until = now() + make_interval(secs => $\(lease)),
                                          claimed_by = $\(lease + 1)::text, replaced_until = previous.leased_until
        FROM pushd.broadcast_jobs previous
        WHERE previous.id = b.id AND \(rows)
        RETURNING b.id, b.app, b.channel_id, b.payload, b.priority, b.expiration, b.apns_id,
                  coalesce(b.environment, (SELECT c.environment FROM pushd.channels c
                                           WHERE c.app = b.app AND c.channel_id = b.channel_id)),
                  b.attempts, b.created_at, b.first_attempt_at,
                  (SELECT c.storage_policy FROM pushd.channels c WHERE c.app = b.app AND c.channel_id = b.channel_id),
                  previous.leased_until
        """
    }

    /// Gives back the broadcast jobs claimed by `owner` whose claim is still as it was made (its
    /// lease running, `run_at` at its end: nothing recorded since): for a claimer whose claim's
    /// answer was lost, so it never learnt which rows it took. Each is due at once, with the
    /// lease its claim replaced (`replaced_until`: one that ran out unsettled, so the next claim
    /// still says the job may have reached APNs already). Rows another session holds are left
    /// to their leases, and so are `excluding`: rows the claimer sent and could not record,
    /// whose takeover must still say they may have reached APNs.
    public func giveBackClaims(_ connection: PGConnection, owner: String, excluding: [Int64] = []) throws -> [GivenBackClaim] {
        let result = try connection.query(connection.prepared("""
            UPDATE pushd.broadcast_jobs b SET run_at = now(), leased_until = b.replaced_until, claimed_by = NULL, replaced_until = NULL
            WHERE b.id IN (SELECT id FROM pushd.broadcast_jobs
                           WHERE claimed_by = $1 AND leased_until > now() AND run_at = leased_until
                             AND NOT (id = ANY ($2::bigint[])) FOR UPDATE SKIP LOCKED)
            RETURNING b.id, b.app, b.leased_until
            """), [owner, excluding])
        return try (0..<result.rowCount).map {
            GivenBackClaim(id: try result.require(row: $0, column: 0), app: try result.require(row: $0, column: 1),
                           replacedUntil: try result.get(row: $0, column: 2))
        }
    }

    /// Moves broadcast job `id`, which `error` (a CHECK) refused to write while pushd was
    /// `doing` it, to `pushd.dead_jobs` (as `dead`, status NULL, attempts as they were). nil
    /// when it is gone or being sent.
    func deadLetterRefused(_ connection: PGConnection, id: Int64, doing: String, error: PGError) throws -> RefusedRewrite? {
        let result = try connection.query(connection.prepared("""
            WITH gone AS (DELETE FROM pushd.broadcast_jobs WHERE id = $1 AND \(Self.notLeased) RETURNING *)
            INSERT INTO pushd.dead_jobs (id, app, device_token, channel_id, payload, push_type, priority, expiration,
                                         apns_id, dedupe_key, environment, run_at, attempts, last_error, created_at,
                                         status, reason, first_attempt_at)
            SELECT id, app, NULL, channel_id, payload, 'liveactivity', priority, expiration, apns_id, dedupe_key,
                   environment, run_at, attempts, last_error, created_at, NULL,
                   'could not be ' || $2::text || ' (' || coalesce(last_error, 'no error') || '): ' || $3::text, first_attempt_at
            FROM gone
            RETURNING app, reason
            """), [id, doing, RefusedRewrite.refusal(error)])
        guard result.rowCount == 1 else { return nil }
        return RefusedRewrite(table: "pushd.broadcast_jobs", id: id, app: try result.require(String.self, row: 0, column: 0),
                              check: error.constraint, message: error.message,
                              reason: try result.require(String.self, row: 0, column: 1))
    }

    /// Makes the waiting broadcast jobs of `app` whose `last_error` begins with one of
    /// `errorPrefixes` due now, and returns how many (as `JobQueue.makeDue` does for jobs).
    /// Jobs being sent (their lease has not ended) are left alone. `environment`: only jobs
    /// going there (nil: every environment). A job a CHECK refuses to write goes to dead
    /// letters, given to `onRefused`.
    @discardableResult
    public func makeDue(_ connection: PGConnection, app: String, environment: OutageEnvironment? = nil, errorPrefixes: [String],
                        onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        guard !errorPrefixes.isEmpty else { return 0 }
        let waiting = """
            SELECT b.id FROM pushd.broadcast_jobs b
            WHERE b.app = $1 AND b.run_at > now() AND b.last_error ^@ ANY ($2::text[]) AND \(Self.notLeased)
              AND \(OutageEnvironment.matches(Self.destination(home: "$4::text"), parameter: 3))
            """
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        return try connection.rowsUpdated(by: "UPDATE pushd.broadcast_jobs SET run_at = now() WHERE id IN (\(waiting))",
                                          [app, errorPrefixes, environment?.name, environment?.home[app] ?? ""],
                                          orOneByOne: waiting, row: Self.makeOneDueSQL, []) { id, error in
            guard let item = try deadLetterRefused(connection, id: id, doing: "made due again", error: error) else { return false }
            refused.append(item)
            return true
        }.changed
    }

    /// Where a broadcast job `b` goes, as the worker resolves it: its own environment, else
    /// its channel's, else its app's, `home`.
    static func destination(home: String) -> String {
        """
        coalesce(b.environment, (SELECT c.environment FROM pushd.channels c
                                 WHERE c.app = b.app AND c.channel_id = b.channel_id), \(home))
        """
    }

    /// Makes the one waiting broadcast job of each of `apps` that is due soonest, among those
    /// whose `last_error` begins with one of `errorPrefixes`, due now, and returns how many (as
    /// `JobQueue.makeSoonestDue` does for jobs). Jobs being sent are left alone.
    /// `environment`: only jobs going there (nil: every environment).
    @discardableResult
    public func makeSoonestDue(_ connection: PGConnection, apps: [String], environment: OutageEnvironment? = nil,
                               errorPrefixes: [String], onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        guard !apps.isEmpty, !errorPrefixes.isEmpty else { return 0 }
        let soonest = """
            SELECT probe.id FROM unnest($1::text[], $4::text[]) AS a(app, home)
            CROSS JOIN LATERAL (
                SELECT b.id FROM pushd.broadcast_jobs b
                WHERE b.app = a.app AND b.run_at > now() AND b.last_error ^@ ANY ($2::text[]) AND \(Self.notLeased)
                  AND \(OutageEnvironment.matches(Self.destination(home: "a.home"), parameter: 3))
                ORDER BY b.run_at LIMIT 1) probe
            """
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        // A broadcast a check refuses goes to dead letters; its app's probe waits for the next turn.
        return try connection.rowsUpdated(by: "UPDATE pushd.broadcast_jobs SET run_at = now() WHERE id IN (\(soonest)) AND \(Self.notLeased)",
                                          [apps, errorPrefixes, environment?.name, OutageEnvironment.homes(environment, apps: apps)],
                                          orOneByOne: soonest, row: Self.makeOneDueSQL, []) { id, error in
            guard let item = try deadLetterRefused(connection, id: id, doing: "made due again", error: error) else { return false }
            refused.append(item)
            return true
        }.changed
    }

    /// Makes one waiting broadcast job (`$1`) due now, unless it is due already or being sent.
    static let makeOneDueSQL = "UPDATE pushd.broadcast_jobs SET run_at = now() WHERE id = $1 AND run_at > now() AND \(notLeased)"

    /// A row no claim is sending now: its lease, if it had one, has ended.
    public static let notLeased = "(leased_until IS NULL OR leased_until <= now())"

    public func delivered(_ connection: PGConnection, ids: [Int64]) throws {
        guard !ids.isEmpty else { return }
        try connection.query(connection.prepared("DELETE FROM pushd.broadcast_jobs WHERE id = ANY ($1::bigint[])"), [ids])
    }

    /// Puts the job back for `runAt`. `sentAt`: when the send being retried went out; the
    /// first one is kept as the job's `first_attempt_at`. nil when nothing was sent.
    public func retry(_ connection: PGConnection, id: Int64, runAt: Timestamp, error: String, countsAsAttempt: Bool,
                      sentAt: Timestamp? = nil) throws {
        try connection.query(connection.prepared("""
            UPDATE pushd.broadcast_jobs SET run_at = $2, last_error = $3, leased_until = NULL,
                                            attempts = attempts + CASE WHEN $4 THEN 1 ELSE 0 END,
                                            first_attempt_at = coalesce(first_attempt_at, $5)
            WHERE id = $1
            """), [id, runAt, error, countsAsAttempt, sentAt])
    }

    /// Moves the job to `pushd.dead_jobs` (with its `channel_id`, no device token).
    public func dead(_ connection: PGConnection, id: Int64, status: Int?, reason: String) throws {
        try connection.query(connection.prepared("""
            WITH gone AS (DELETE FROM pushd.broadcast_jobs WHERE id = $1 RETURNING *)
            INSERT INTO pushd.dead_jobs (id, app, device_token, channel_id, payload, push_type, priority, expiration,
                                         apns_id, dedupe_key, environment, run_at, attempts, last_error, created_at,
                                         status, reason, first_attempt_at)
            SELECT id, app, NULL, channel_id, payload, 'liveactivity', priority, expiration, apns_id, dedupe_key,
                   environment, run_at, attempts + 1, last_error, created_at, $2, $3, first_attempt_at
            FROM gone
            """), [id, status, reason])
    }

    /// Due broadcasts and channel requests of `apps` (but those `leaving` names, which the
    /// claims leave), for the sleep decision: work left to another instance must not keep this
    /// one's worker from sleeping.
    public func hasDue(_ connection: PGConnection, apps: [String], leaving: JobQueue.Leaving = JobQueue.Leaving()) throws -> Bool {
        guard !apps.isEmpty else { return false }
        guard !leaving.environments.isEmpty else {
            let channels = """
                EXISTS (SELECT 1 FROM pushd.channels WHERE app = ANY ($1::text[]) AND run_at <= now()
                        AND state IN ('pending_create', 'pending_delete'))
                """
            return try connection.query(connection.prepared("""
                SELECT EXISTS (SELECT 1 FROM pushd.broadcast_jobs WHERE app = ANY ($1::text[]) AND run_at <= now())
                    OR \(channels)
                """), [apps]).require(Bool.self, row: 0, column: 0)
        }
        return try connection.query(connection.prepared("""
            SELECT EXISTS (SELECT 1 FROM pushd.broadcast_jobs b
                           JOIN unnest($1::text[], $2::text[], $3::text[]) AS a(app, leave, home) ON a.app = b.app
                           WHERE b.run_at <= now() AND \(Self.notLeft))
                OR EXISTS (SELECT 1 FROM pushd.channels q
                           JOIN unnest($1::text[], $2::text[], $3::text[]) AS a(app, leave, home) ON a.app = q.app
                           WHERE q.run_at <= now() AND q.state IN ('pending_create', 'pending_delete') AND \(ChannelStore.notLeft))
            """), [apps] + Self.leavingParameters(leaving, apps: apps)).require(Bool.self, row: 0, column: 0)
    }
}

/// A broadcast job or channel request given back after a claim whose answer was lost
/// (`BroadcastQueue.giveBackClaims`, `ChannelStore.giveBackClaims`).
public struct GivenBackClaim: Sendable, Hashable {
    public var id: Int64
    public var app: String
    /// The lease the lost claim had replaced, put back: one that ran out unsettled (the next
    /// claim says the row may have reached APNs already); nil when the row was free.
    public var replacedUntil: Timestamp?
}
