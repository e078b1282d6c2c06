import Posix

/// One pending channel operation, as pushd carries it out against APNs.
public struct ChannelOperation: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case create = "pending_create"
        case delete = "pending_delete"
    }

    public var id: Int64
    public var app: String
    public var kind: Kind
    /// nil for a create (APNs makes the id).
    public var channelID: String?
    /// nil: the app's configured environment.
    public var environment: String?
    /// "none" or "most-recent".
    public var storagePolicy: String
    public var attempts: Int
    public var requestedAt: Timestamp
    /// When an earlier claim's lease of this request ran out with no outcome recorded (its
    /// instance stopped, hung or lost the database while carrying it out): it is taken over,
    /// and APNs may have carried it out already. nil for a request no claim left unsettled.
    public var unsettledLeaseEndedAt: Timestamp? = nil
}

/// `pushd.channels`: the operations applications asked for with `pushd.create_channel` and
/// `pushd.delete_channel`, claimed by lease (a worker that dies leaves them due again after
/// `leaseSeconds`), and their outcomes.
public struct ChannelStore: Sendable {
    /// The channel the table's trigger notifies on every request.
    public static let channel = "pushd_channels"

    public init() {}

    /// Takes up to `limit` due operations of `apps` and pushes their `run_at` past the lease.
    ///
    /// `leaving` names, per app, the environment this instance leaves to other instances
    /// (`JobQueue.Leaving.environments`: it has no credentials there and another live instance
    /// has): a request going there (its channel's environment, else the app's) is not claimed,
    /// so an instance that could only put it back neither delays nor rewrites it. A channel
    /// request needs no token key, so `leaving`'s token-only apps do not matter here.
    ///
    /// `owner` names the claimer in the rows (`claimed_by`), so that a claim whose answer was
    /// lost can be given back (`giveBackClaims`); the row keeps the lease its claim replaced.
    public func claim(_ connection: PGConnection, limit: Int, apps: [String], leaving: JobQueue.Leaving = JobQueue.Leaving(),
                      leaseSeconds: Double, owner: String? = nil) throws -> [ChannelOperation] {
        guard limit > 0, !apps.isEmpty else { return [] }
        let leaves = !leaving.environments.isEmpty
        let due = leaves ? Self.dueLeavingSQL : Self.dueSQL
        let dueParameters: [any PGParameter] = leaves ? [limit, apps] + BroadcastQueue.leavingParameters(leaving, apps: apps) : [limit, apps]
        let lease = dueParameters.count + 1
        let result = try connection.query(connection.prepared("""
            UPDATE pushd.channels c SET run_at = now() + make_interval(secs => $\(lease)), leased_until = now() + make_interval(secs => $\(lease)),
                                        claimed_by = $\(lease + 1)::text, replaced_until = previous.leased_until
            FROM pushd.channels previous
            WHERE previous.id = c.id AND c.id = ANY (ARRAY(\(due)))
            RETURNING c.id, c.app, c.state, c.channel_id, c.environment, c.storage_policy, c.attempts, c.requested_at,
                      previous.leased_until
            """), dueParameters + [leaseSeconds, owner])
        return try result.rows.map { row in
            let state: String = try row.require(2)
            guard let kind = ChannelOperation.Kind(rawValue: state) else {
                throw QueueError("pushd.channels row \(try row.require(0) as Int64) has state \(state), not a pending operation")
            }
            return ChannelOperation(id: try row.require(0), app: try row.require(1), kind: kind, channelID: try row.get(3),
                                    environment: try row.get(4), storagePolicy: try row.require(5), attempts: try row.require(6),
                                    requestedAt: try row.require(7), unsettledLeaseEndedAt: try row.get(8))
        }
    }

    /// Gives back the pending channel requests claimed by `owner` whose claim is still as it
    /// was made (its lease running, `run_at` at its end: nothing recorded since), as
    /// `BroadcastQueue.giveBackClaims` does broadcast jobs.
    public func giveBackClaims(_ connection: PGConnection, owner: String, excluding: [Int64] = []) throws -> [GivenBackClaim] {
        let result = try connection.query(connection.prepared("""
            UPDATE pushd.channels c SET run_at = now(), leased_until = c.replaced_until, claimed_by = NULL, replaced_until = NULL
            WHERE c.id IN (SELECT id FROM pushd.channels
                           WHERE claimed_by = $1 AND state IN ('pending_create', 'pending_delete')
                             AND leased_until > now() AND run_at = leased_until
                             AND NOT (id = ANY ($2::bigint[])) FOR UPDATE SKIP LOCKED)
            RETURNING c.id, c.app, c.leased_until
            """), [owner, excluding])
        return try (0..<result.rowCount).map {
            GivenBackClaim(id: try result.require(row: $0, column: 0), app: try result.require(row: $0, column: 1),
                           replacedUntil: try result.get(row: $0, column: 2))
        }
    }

    /// The due requests of the apps `$2`, oldest first, at most `$1`.
    static let dueSQL = """
        SELECT id FROM pushd.channels
        WHERE state IN ('pending_create', 'pending_delete') AND run_at <= now() AND app = ANY ($2::text[])
        ORDER BY run_at LIMIT $1 FOR UPDATE SKIP LOCKED
        """

    /// `dueSQL` for an instance that leaves some environment of some apps to other instances:
    /// `$3` names per app of `$2` the environment it leaves (NULL: none), `$4` the app's own
    /// environment, where a request goes whose channel names none.
    static let dueLeavingSQL = """
        SELECT q.id FROM pushd.channels q
        JOIN unnest($2::text[], $3::text[], $4::text[]) AS a(app, leave, home) ON a.app = q.app
        WHERE q.state IN ('pending_create', 'pending_delete') AND q.run_at <= now() AND \(notLeft)
        ORDER BY q.run_at LIMIT $1 FOR UPDATE OF q SKIP LOCKED
        """

    /// A request `q` of app `a` does not go to the environment `a.leave`.
    static let notLeft = "(a.leave IS NULL OR coalesce(q.environment, a.home) IS DISTINCT FROM a.leave)"

    /// Makes the pending channel requests of `app` whose `outcome` begins with one of
    /// `outcomePrefixes` due now, and returns how many (as `JobQueue.makeDue` does for jobs).
    /// Requests being carried out (their lease has not ended) are left alone. `environment`:
    /// only requests going there (their channel's environment, else their app's; nil: every
    /// environment).
    @discardableResult
    public func makeDue(_ connection: PGConnection, app: String, environment: OutageEnvironment? = nil, outcomePrefixes: [String]) throws -> Int {
        guard !outcomePrefixes.isEmpty else { return 0 }
        return try connection.rowsUpdated(by: """
            UPDATE pushd.channels SET run_at = now()
            WHERE app = $1 AND state IN ('pending_create', 'pending_delete') AND run_at > now()
              AND outcome ^@ ANY ($2::text[]) AND \(BroadcastQueue.notLeased)
              AND \(OutageEnvironment.matches("coalesce(environment, $4::text)", parameter: 3))
            """, [app, outcomePrefixes, environment?.name, environment?.home[app] ?? ""])
    }

    /// Makes the one pending channel request of each of `apps` that is due soonest, among those
    /// whose `outcome` begins with one of `outcomePrefixes`, due now, and returns how many (as
    /// `JobQueue.makeSoonestDue` does for jobs). Requests being carried out are left alone.
    /// `environment`: only requests going there (nil: every environment).
    @discardableResult
    public func makeSoonestDue(_ connection: PGConnection, apps: [String], environment: OutageEnvironment? = nil,
                               outcomePrefixes: [String]) throws -> Int {
        guard !apps.isEmpty, !outcomePrefixes.isEmpty else { return 0 }
        return try connection.rowsUpdated(by: """
            UPDATE pushd.channels SET run_at = now()
            WHERE id IN (
                SELECT probe.id FROM unnest($1::text[], $4::text[]) AS a(app, home)
                CROSS JOIN LATERAL (
                    SELECT q.id FROM pushd.channels q
                    WHERE q.app = a.app AND q.state IN ('pending_create', 'pending_delete') AND q.run_at > now()
                      AND q.outcome ^@ ANY ($2::text[]) AND \(BroadcastQueue.notLeased)
                      AND \(OutageEnvironment.matches("coalesce(q.environment, a.home)", parameter: 3))
                    ORDER BY q.run_at LIMIT 1) probe)
              AND \(BroadcastQueue.notLeased)
            """, [apps, outcomePrefixes, environment?.name, OutageEnvironment.homes(environment, apps: apps)])
    }

    /// APNs created the channel: the row becomes active with its id and environment.
    /// `outcome`: "created", with the request's `apns-request-id` when there is one.
    public func recordCreated(_ connection: PGConnection, id: Int64, channelID: String, environment: String,
                              outcome: String = "created") throws {
        try connection.query(connection.prepared("""
            UPDATE pushd.channels SET state = 'active', channel_id = $2, environment = $3, created_at = now(),
                                      outcome = $4, attempts = attempts + 1
            WHERE id = $1
            """), [id, channelID, environment, outcome])
    }

    /// APNs deleted the channel (or never knew it: ChannelNotRegistered is recorded as such).
    public func recordDeleted(_ connection: PGConnection, id: Int64, environment: String, outcome: String) throws {
        try connection.query(connection.prepared("""
            UPDATE pushd.channels SET state = 'deleted', deleted_at = now(), environment = coalesce(environment, $2),
                                      outcome = $3, attempts = attempts + 1
            WHERE id = $1
            """), [id, environment, outcome])
    }

    /// Retrying cannot help: state 'failed', the reason in `outcome`.
    public func recordFailed(_ connection: PGConnection, id: Int64, outcome: String) throws {
        try connection.query(connection.prepared("""
            UPDATE pushd.channels SET state = 'failed', outcome = $2, attempts = attempts + 1 WHERE id = $1
            """), [id, outcome])
    }

    /// Try again at `runAt`; the row stays pending with the error in `outcome`.
    public func recordRetry(_ connection: PGConnection, id: Int64, runAt: Timestamp, outcome: String, countsAsAttempt: Bool = true) throws {
        try connection.query(connection.prepared("""
            UPDATE pushd.channels SET run_at = $2, outcome = $3, leased_until = NULL, attempts = attempts + CASE WHEN $4 THEN 1 ELSE 0 END WHERE id = $1
            """), [id, runAt, outcome, countsAsAttempt])
    }

    /// The channels of `app` (all apps when nil), newest first.
    public func list(_ connection: PGConnection, app: String?, includeDeleted: Bool = false) throws -> [ChannelRow] {
        let result = try connection.query(connection.prepared("""
            SELECT id, app, channel_id, environment, storage_policy, state, outcome, requested_at, created_at, deleted_at
            FROM pushd.channels WHERE ($1::text IS NULL OR app = $1) AND ($2 OR state <> 'deleted')
            ORDER BY id DESC
            """), [app, includeDeleted])
        return try result.rows.map { row in
            ChannelRow(id: try row.require(0), app: try row.require(1), channelID: try row.get(2), environment: try row.get(3),
                       storagePolicy: try row.require(4), state: try row.require(5), outcome: try row.get(6),
                       requestedAt: try row.require(7), createdAt: try row.get(8), deletedAt: try row.get(9))
        }
    }

    public func row(_ connection: PGConnection, id: Int64) throws -> ChannelRow? {
        try list(connection, app: nil, includeDeleted: true).first { $0.id == id }
    }

    /// `pushd.create_channel`, for the command line.
    public func requestCreate(_ connection: PGConnection, app: String, storagePolicy: String, environment: String?) throws -> Int64 {
        try connection.query("SELECT pushd.create_channel($1, $2, $3)", [app, storagePolicy, environment])
            .require(Int64.self, row: 0, column: 0)
    }

    /// `pushd.delete_channel`, for the command line.
    public func requestDelete(_ connection: PGConnection, app: String, channelID: String, environment: String?) throws -> Int64 {
        try connection.query("SELECT pushd.delete_channel($1, $2, $3)", [app, channelID, environment])
            .require(Int64.self, row: 0, column: 0)
    }
}

/// One row of `pushd.channels`.
public struct ChannelRow: Sendable, Hashable {
    public var id: Int64
    public var app: String
    public var channelID: String?
    public var environment: String?
    public var storagePolicy: String
    public var state: String
    public var outcome: String?
    public var requestedAt: Timestamp
    public var createdAt: Timestamp?
    public var deletedAt: Timestamp?
}
