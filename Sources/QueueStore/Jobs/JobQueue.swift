import Posix

/// The transactional lane: claim, then settle, a batch of `pushd.jobs`.
///
/// Design: the claim *is* the delete. `claim` opens a transaction and runs
/// `DELETE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED)) RETURNING`;
/// `finish` re-inserts the retries (same id, attempts + 1, later run_at), copies the
/// dead jobs to `pushd.dead_jobs` and commits. A delivered job therefore costs one
/// row write (the delete) and nothing else — the same as a bare `DELETE … RETURNING`
/// loop — and a retried one two. Other claimers skip rows deleted by an open
/// transaction, and if the claimer dies (kill -9, network cut,
/// `pg_terminate_backend`, idle-in-transaction timeout) the transaction aborts and
/// every job of the batch is visible again, with no lease to wait for. The price
/// is that a batch holds its connection until it is settled, so batches should be
/// sent and settled within seconds.
public struct JobQueue: Sendable {
    /// The channel the statement-level insert trigger notifies while a claimer sleeps.
    public static let channel = "pushd_jobs"

    public init() {}

    static let columns = """
        id, app, device_token, payload, push_type, priority, expiration, collapse_id, apns_id,
        dedupe_key, user_id, environment, run_at, attempts, last_error, created_at, first_attempt_at
        """

    // One index range per priority and app, highest priority first, each stopping at the
    // first future run_at; jobs of apps not in $2 are never read. The last column is where a
    // job that names no environment goes, its token's registered one: read here rather than
    // in a second round trip before the batch can be sent. The branches are CTEs
    // because FOR UPDATE cannot sit under UNION; CTE scans and the nested loops over the
    // apps run on demand, so once the outer LIMIT is met nothing more is read or locked.
    static let claimSQL = claimSQL(leaving: false)

    /// The claim of an instance that leaves some work of some apps to other instances:
    /// `$3` names per app the environment it leaves (NULL: none), `$4` is the app's own
    /// environment, where a job goes that names none and whose token is not registered, `$5`
    /// is 't' for an app whose pushes of the types in `$6` (those APNs takes only with token
    /// authentication) it leaves (NULL: none). Only apps leaving an environment pay for the
    /// token lookup.
    static let claimLeavingSQL = claimSQL(leaving: true)

    static func claimSQL(leaving: Bool) -> String {
        let apps = leaving ? "unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS a(app, leave, home, token_only)"
                           : "unnest($2::text[]) AS a(app)"
        let left = leaving ? " AND " + leftToOthers(pushTypes: "$6") : ""
        func branch(_ priority: Int) -> String {
            """
            SELECT j.id FROM \(apps) CROSS JOIN LATERAL (
                             SELECT q.id FROM pushd.jobs q WHERE q.app = a.app AND q.priority = \(priority) AND q.run_at <= now()\(left)
                             ORDER BY q.run_at LIMIT $1 FOR UPDATE SKIP LOCKED) j
            """
        }
        return """
            WITH p10 AS (\(branch(10))),
                 p5 AS (\(branch(5))),
                 p1 AS (\(branch(1))),
                 claimed AS (DELETE FROM pushd.jobs WHERE id = ANY (ARRAY(
                     SELECT id FROM (SELECT id FROM p10 UNION ALL SELECT id FROM p5 UNION ALL SELECT id FROM p1) due LIMIT $1))
                     RETURNING \(columns))
            SELECT claimed.*, (SELECT d.environment FROM pushd.device_tokens d
                               WHERE claimed.environment IS NULL AND d.app = claimed.app AND d.token = lower(claimed.device_token)),
                   \(TransactionFate.currentIDSQL)
            FROM claimed
            """
    }

    /// A job `q` of app `a` is not in the environment `a.leave` (where it goes is its own
    /// environment, else its token's registered one, else the app's: `AppSender.environment`),
    /// and when `a.token_only` is set, its push type is not one of the array `pushTypes`.
    static func leftToOthers(pushTypes: String) -> String {
        """
        (a.leave IS NULL OR coalesce(q.environment, (SELECT d.environment FROM pushd.device_tokens d
                                                      WHERE d.app = a.app AND d.token = lower(q.device_token)), a.home)
                            IS DISTINCT FROM a.leave)
        AND (a.token_only IS NULL OR q.push_type <> ALL (\(pushTypes)::text[]))
        """
    }

    static let retrySQL = """
        INSERT INTO pushd.jobs (\(columns)) OVERRIDING SYSTEM VALUE
        SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::smallint[],
                             $7::timestamptz[], $8::text[], $9::uuid[], $10::text[], $11::text[], $12::text[],
                             $13::timestamptz[], $14::integer[], $15::text[], $16::timestamptz[], $17::timestamptz[])
        """

    static let deadSQL = """
        INSERT INTO pushd.dead_jobs (\(columns), status, reason)
        SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::smallint[],
                             $7::timestamptz[], $8::text[], $9::uuid[], $10::text[], $11::text[], $12::text[],
                             $13::timestamptz[], $14::integer[], $15::text[], $16::timestamptz[], $17::timestamptz[],
                             $18::integer[], $19::text[])
        """

    /// Takes up to `limit` due jobs of `apps`, highest priority first, then oldest
    /// `run_at` within an app. Jobs of every other app stay queued untouched: they
    /// belong to an instance configured for them (or to an app whose credentials are
    /// broken). Within a priority the apps take turns leading a batch, so one app's
    /// backlog does not starve another's.
    ///
    /// `leaving` names the jobs left to other instances: those of an app that go to the
    /// environment given for it, and those of a push type APNs takes only with token
    /// authentication of an app named for it (`Leaving`), which this instance cannot send and
    /// another live instance can.
    ///
    /// A row the claim took that pushd cannot read is dead-lettered in the claim's transaction
    /// and reported in `unreadable`, so the rest of the batch and the apps behind it go on.
    ///
    /// On a non-empty result the connection is left inside the claiming transaction:
    /// settle it with `finish` (or `abandon`) on the same connection. An empty result
    /// leaves no transaction open; with `commitEmptyWithoutWaiting` its COMMIT is sent and
    /// not waited for (`PGConnection.commitWithoutWaiting`): a busy claimer's poll is then
    /// one round trip it waits for, BEGIN and the claim together.
    public func claim(_ connection: PGConnection, limit: Int, apps: [String], leaving: Leaving = Leaving(),
                      commitEmptyWithoutWaiting: Bool = false) throws -> ClaimedJobs {
        guard limit > 0 else { throw QueueError("claim limit must be positive, got \(limit)") }
        guard !apps.isEmpty else { return ClaimedJobs(jobs: []) }
        let lead = Int.random(in: 0..<apps.count)
        let turn = Array(apps[lead...] + apps[..<lead])
        let statement: PGStatement
        var parameters: [any PGParameter] = [limit, turn]
        if leaving.isEmpty {
            statement = try connection.prepared(Self.claimSQL)
        } else {
            statement = try connection.prepared(Self.claimLeavingSQL)
            parameters += leaving.parameters(turn)
        }
        do {
            // BEGIN travels with the claim: a claim costs one round trip, not two.
            // On its generic plan: the same per-app index scans whatever the parameters, where
            // PostgreSQL's default planned each claim afresh, half of its CPU while jobs trickle in.
            let result = try connection.beginAndQuery(statement, parameters, genericPlan: true)
            if result.rowCount == 0 {
                if commitEmptyWithoutWaiting {
                    try connection.commitWithoutWaiting()
                } else {
                    try connection.execute(script: "COMMIT")
                }
                return ClaimedJobs(jobs: [])
            }
            var jobs = [Job]()
            var unreadable = [UnreadableJob]()
            let transaction: Int64 = try result.require(row: 0, column: 18)
            jobs.reserveCapacity(result.rowCount)
            for row in result.rows {
                do {
                    var job = try Self.decode(row)
                    job.registeredEnvironment = try row.get(17)
                    jobs.append(job)
                } catch {
                    // One row pushd cannot read must not roll the claim back on every turn, and
                    // with it the due jobs of every app behind it: it is dead-lettered in the claim.
                    unreadable.append(try Self.deadLetterUnreadable(connection, row, error))
                }
            }
            if jobs.isEmpty { try connection.execute(script: "COMMIT") }
            return ClaimedJobs(jobs: jobs, unreadable: unreadable, transaction: jobs.isEmpty ? nil : transaction)
        } catch {
            if connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
    }

    /// Settles a claimed batch and commits: delivered jobs stay deleted, retries go
    /// back with `attempts + 1`, failures move to `pushd.dead_jobs`. Throws, and
    /// rolls the whole batch back into the queue, if an id is missing, unknown or
    /// listed twice.
    ///
    /// A retry inserts the job again, so every CHECK of `pushd.jobs` applies to it, also one a
    /// migration added NOT VALID after the job was queued (such a check exempts only the rows
    /// already there, until they are written again). A retry a check refuses goes to
    /// `pushd.dead_jobs` with the check's message instead of rolling the batch back, which would
    /// send the same batch again on every claim; the refused retries are returned so that the
    /// caller can count and report them.
    @discardableResult
    public func finish(_ connection: PGConnection, _ batch: ClaimedJobs, _ outcomes: JobOutcomes) throws -> [RefusedRetry] {
        do {
            try Self.checkCovers(batch, outcomes)
            let byID = Dictionary(uniqueKeysWithValues: batch.jobs.map { ($0.id, $0) })
            var refused = [RefusedRetry]()
            if !outcomes.retries.isEmpty {
                let jobs = outcomes.retries.map { retry -> Job in
                    var job = byID[retry.id]!
                    if retry.countsAsAttempt { job.attempts += 1 }
                    if job.firstAttemptAt == nil { job.firstAttemptAt = retry.sentAt }
                    job.runAt = retry.runAt
                    job.lastError = retry.error
                    return job
                }
                refused = try requeue(connection, jobs)
            }
            var dead = outcomes.failures.map { failure -> (job: Job, status: Int?, reason: String) in
                var job = byID[failure.id]!
                job.attempts += 1
                return (job, failure.status, failure.reason)
            }
            for item in refused { dead.append((job: item.job, status: nil, reason: item.reason)) }
            if !dead.isEmpty {
                try connection.query(connection.prepared(Self.deadSQL),
                                     Self.columnArrays(dead.map(\.job)) + [dead.map(\.status), dead.map(\.reason)])
            }
            try connection.execute(script: "COMMIT")
            return refused
        } catch {
            if connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
    }

    /// Inserts the retried `jobs` again and returns those a CHECK constraint refused, each
    /// with what the check said. All at once first; only when a check refuses that insert are
    /// they inserted one by one, each under a savepoint, to tell which.
    private func requeue(_ connection: PGConnection, _ jobs: [Job]) throws -> [RefusedRetry] {
        let statement = try connection.prepared(Self.retrySQL)
        _ = try connection.execute(script: "SAVEPOINT pushd_requeue")
        do {
            try connection.query(statement, Self.columnArrays(jobs))
            _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_requeue")
            return []
        } catch let error as PGError where error.code == .checkViolation {
            _ = try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_requeue")
        }
        var refused = [RefusedRetry]()
        for job in jobs {
            do {
                try connection.query(statement, Self.columnArrays([job]))
                _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_requeue; SAVEPOINT pushd_requeue")
            } catch let error as PGError where error.code == .checkViolation {
                _ = try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_requeue")
                refused.append(RefusedRetry(job: job, check: error.constraint, message: error.message))
            }
        }
        _ = try connection.execute(script: "RELEASE SAVEPOINT pushd_requeue")
        return refused
    }

    // The claim's DELETE, of the ids of a batch whose claiming transaction ended (its session
    // was cut, or its COMMIT failed) rather than of the due jobs: rows another claimer holds are
    // skipped, rows already settled are gone, or back as a retry written by that settle (a later
    // `run_at`, and an attempt more or another error): only a row as the claim found it is taken.
    static let retakeSQL = """
        DELETE FROM pushd.jobs WHERE id = ANY (ARRAY(
            SELECT j.id FROM pushd.jobs j JOIN \(asClaimed) ON c.id = j.id
            WHERE \(stillAsClaimed) FOR UPDATE OF j SKIP LOCKED))
        RETURNING \(columns), \(TransactionFate.currentIDSQL)
        """

    /// The rows of a batch (`$1`–`$4`: id, run_at, attempts, last_error of each job as claimed).
    static let asClaimed = """
        unnest($1::bigint[], $2::timestamptz[], $3::integer[], $4::text[]) AS c(id, run_at, attempts, last_error)
        """
    /// A job row `j` as its claim `c` found it: no settle has written it since.
    static let stillAsClaimed = """
        abs(extract(epoch FROM j.run_at - c.run_at)) < 0.0005 AND j.attempts = c.attempts
        AND j.last_error IS NOT DISTINCT FROM c.last_error
        """

    // Those of a batch's rows as claimed that another claimer's open transaction holds (deleted
    // there, not yet committed, so still seen here).
    static let heldElsewhereSQL = """
        SELECT j.id FROM pushd.jobs j JOIN \(asClaimed) ON c.id = j.id WHERE \(stillAsClaimed)
        """

    private static func claimedParameters(_ batch: ClaimedJobs) -> [any PGParameter] {
        [batch.jobs.map(\.id), batch.jobs.map(\.runAt), batch.jobs.map { Int32(clamping: $0.attempts) }, batch.jobs.map(\.lastError)]
    }

    /// Takes again, in a new transaction on `connection`, the jobs of `batch` whose claim was
    /// rolled back after they were sent (the claiming session ended, or `finish` failed), so that
    /// the outcomes already known for them can be recorded with `finish` and they are not sent
    /// again. The rollback put every job of the batch back under the same id; a job another
    /// claimer holds (locked) is not taken: that claimer sends it again (`heldElsewhere` names
    /// them). Nor is one settled since the claim (gone, or back as a retry): by that claimer, or
    /// by the claim's own COMMIT when it went through and only its reply was lost. Returns the
    /// jobs taken, as their rows are now; as with `claim`, a non-empty result leaves the
    /// connection inside the transaction, to be settled with `finish`.
    public func retake(_ connection: PGConnection, _ batch: ClaimedJobs) throws -> ClaimedJobs {
        guard !batch.isEmpty else { return ClaimedJobs(jobs: []) }
        do {
            let result = try connection.beginAndQuery(connection.prepared(Self.retakeSQL), Self.claimedParameters(batch))
            let registered = Dictionary(uniqueKeysWithValues: batch.jobs.map { ($0.id, $0.registeredEnvironment) })
            var jobs = [Job]()
            for row in result.rows {
                var job = try Self.decode(row)
                job.registeredEnvironment = registered[job.id] ?? nil
                jobs.append(job)
            }
            if jobs.isEmpty { try connection.execute(script: "COMMIT") }
            return try ClaimedJobs(jobs: jobs, transaction: jobs.isEmpty ? nil : result.require(row: 0, column: 17))
        } catch {
            if connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
    }

    /// The jobs of `batch`, as it was claimed, that another claimer's open transaction holds:
    /// what `retake` could not take and that claimer sends again. After `retake`, on the same
    /// connection (the jobs it took are gone from its view).
    public func heldElsewhere(_ connection: PGConnection, _ batch: ClaimedJobs) throws -> Set<Int64> {
        guard !batch.isEmpty else { return [] }
        return Set(try connection.query(connection.prepared(Self.heldElsewhereSQL), Self.claimedParameters(batch)).rows
            .map { try $0.require(0) as Int64 })
    }

    /// Puts every job of the batch back untouched (for a shutdown before sending).
    public func abandon(_ connection: PGConnection) throws {
        try connection.execute(script: "ROLLBACK")
    }

    /// The advisory lock inserts hold shared while deciding whether to notify: "pushdwak".
    public static let wakeupLockKey: Int64 = 0x7075_7368_6477_616B

    /// Subscribes the connection to insert notifications; once per connection, before
    /// the first `sleepUntilJobs`.
    public func listen(_ connection: PGConnection) throws {
        try connection.listen(Self.channel)
    }

    /// One index probe per priority and app: true when some job of `apps` is due and not held by another
    /// claimer's open batch (`xmax = 0`: no deleter or locker). This is the cheap poll
    /// for a claimer that found work recently, since inserts do not notify busy claimers.
    /// Rows left with the xmax of an aborted claim are not seen here; the fallback
    /// time-out of `sleepUntilJobs` picks them up.
    public func hasDueJobs(_ connection: PGConnection, apps: [String], leaving: Leaving = Leaving()) throws -> Bool {
        guard !apps.isEmpty else { return false }
        if !leaving.isEmpty {
            // Jobs left to other instances are not work for this one: seen as due, they
            // would keep this claimer polling in a loop until another instance took them.
            let leavingApps = apps.filter { leaving.leaves($0) }
            return try connection.query(connection.prepared("""
                SELECT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS a(app, leave, home, token_only)
                               CROSS JOIN (VALUES (10::smallint), (5::smallint), (1::smallint)) AS p(priority)
                               CROSS JOIN LATERAL (SELECT 1 FROM pushd.jobs q
                                                   WHERE q.app = a.app AND q.priority = p.priority AND q.run_at <= now()
                                                     AND q.xmax = '0'::xid AND \(Self.leftToOthers(pushTypes: "$5")) LIMIT 1) j)
                """), [leavingApps] + leaving.parameters(leavingApps))
                .require(Bool.self, row: 0, column: 0)
                || hasDueJobs(connection, apps: apps.filter { !leaving.leaves($0) })
        }
        return try connection.query(connection.prepared("""
            SELECT EXISTS (SELECT 1 FROM pushd.jobs WHERE app = ANY ($1::text[]) AND priority = 10 AND run_at <= now() AND xmax = '0'::xid)
                OR EXISTS (SELECT 1 FROM pushd.jobs WHERE app = ANY ($1::text[]) AND priority = 5 AND run_at <= now() AND xmax = '0'::xid)
                OR EXISTS (SELECT 1 FROM pushd.jobs WHERE app = ANY ($1::text[]) AND priority = 1 AND run_at <= now() AND xmax = '0'::xid)
            """), [apps]).require(Bool.self, row: 0, column: 0)
    }

    /// What ended a busy claimer's wait (`waitWhileBusy`).
    public enum BusyWake: Sendable, Equatable {
        /// An insert's notification arrived during the wait.
        case notified
        /// The wait ended without one.
        case timedOut
    }

    /// The wait of a claimer that found work recently, between two claims: up to
    /// `timeoutMilliseconds` on its connection for an insert's notification. The claim is the
    /// probe: with its empty COMMIT not waited for (`claim(…, commitEmptyWithoutWaiting: true)`)
    /// a poll costs one round trip, where a separate probe, the claim and its COMMIT cost three.
    /// Inserts notify while any claimer of the fleet is registered as asleep (`sleepUntilJobs`),
    /// and every listening connection receives the notification, so a busy claimer takes the job
    /// the moment it is committed instead of at the end of its poll interval. Notifications
    /// queued before the wait are dropped first: the claim before it has seen their jobs.
    public func waitWhileBusy(_ connection: PGConnection, timeoutMilliseconds: Int32) throws -> BusyWake {
        _ = try connection.pendingNotifications()
        return try connection.waitForNotifications(timeoutMilliseconds: timeoutMilliseconds).isEmpty ? .timedOut : .notified
    }

    /// Sleeps until an insert notifies or `timeoutMilliseconds` pass (the fallback poll,
    /// which also catches jobs scheduled for later). Returns true when woken by an
    /// insert or when jobs of `apps` were already due.
    ///
    /// The connection registers as a sleeping claimer so that inserts notify, then
    /// waits on the advisory lock for inserts that decided not to notify before the
    /// registration was visible, then checks for due jobs, and only then sleeps.
    public func sleepUntilJobs(_ connection: PGConnection, apps: [String], leaving: Leaving = Leaving(),
                               timeoutMilliseconds: Int32) throws -> Bool {
        try connection.query(connection.prepared("""
            WITH stale AS (
                DELETE FROM pushd.job_waiters w
                WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.pid)
            )
            INSERT INTO pushd.job_waiters (pid) VALUES (pg_backend_pid())
            ON CONFLICT (pid) DO UPDATE SET since = now()
            """))
        defer { _ = try? connection.query("DELETE FROM pushd.job_waiters WHERE pid = pg_backend_pid()") }
        try connection.query("SELECT pg_advisory_lock($1), pg_advisory_unlock($1)", [Self.wakeupLockKey])
        _ = try connection.pendingNotifications()
        if try hasDueJobs(connection, apps: apps, leaving: leaving) { return true }
        return !(try connection.waitForNotifications(timeoutMilliseconds: timeoutMilliseconds)).isEmpty
    }

    static func checkCovers(_ batch: ClaimedJobs, _ outcomes: JobOutcomes) throws {
        var pending = Set(batch.jobs.map(\.id))
        for id in outcomes.delivered + outcomes.retries.map(\.id) + outcomes.failures.map(\.id) {
            guard pending.remove(id) != nil else {
                throw QueueError("job \(id) is not in the claimed batch or has two outcomes; the batch was returned to the queue")
            }
        }
        guard pending.isEmpty else {
            throw QueueError("jobs \(pending.sorted().prefix(10).map(String.init).joined(separator: ", ")) of the claimed batch have no outcome; the batch was returned to the queue")
        }
    }

    /// A timestamp column's text as the claim returned it, as a `timestamptz` pushd can read
    /// (finite, from year 1 to 9999), else NULL.
    private static func readable(_ parameter: Int) -> String {
        "(SELECT CASE WHEN isfinite(t) AND t >= timestamptz '0001-01-01 00:00:00+00' AND t < timestamptz '10000-01-01 00:00:00+00' THEN t END FROM (SELECT $\(parameter)::timestamptz) AS v(t))"
    }

    /// Moves a claimed row that `decode` cannot read (a timestamp such as `infinity` or of year
    /// 10000, which the table's CHECKs let in) into `pushd.dead_jobs`, from the
    /// text the claim returned: its timestamps that cannot be read are left NULL there (`run_at`
    /// and `created_at`: now), and the reason names the column and its value.
    static func deadLetterUnreadable(_ connection: PGConnection, _ row: PGRow, _ error: any Error) throws -> UnreadableJob {
        let id = try row.require(0, as: Int64.self)
        let app = try row.require(1, as: String.self)
        var values = [any PGParameter]()
        for column in 0..<17 { values.append(try row.get(column, as: String.self)) }
        let reason = "pushd cannot read this job's row: \(error)"
        values.append(reason)
        try connection.query(connection.prepared("""
            INSERT INTO pushd.dead_jobs (\(columns), status, reason)
            SELECT $1::bigint, $2, $3, $4, $5, $6::smallint, \(readable(7)), $8, $9::uuid, $10, $11, $12,
                   coalesce(\(readable(13)), now()), $14::integer, $15, coalesce(\(readable(16)), now()), \(readable(17)),
                   NULL, $18
            """), values)
        return UnreadableJob(id: id, app: app, reason: reason)
    }

    static func columnArrays(_ jobs: [Job]) -> [any PGParameter] {
        [jobs.map(\.id), jobs.map(\.app), jobs.map(\.deviceToken), jobs.map(\.payload), jobs.map(\.pushType),
         jobs.map { Int16($0.priority) }, jobs.map(\.expiration), jobs.map(\.collapseID), jobs.map(\.apnsID),
         jobs.map(\.dedupeKey), jobs.map(\.userID), jobs.map(\.environment), jobs.map(\.runAt),
         jobs.map { Int32(clamping: $0.attempts) }, jobs.map(\.lastError), jobs.map(\.createdAt), jobs.map(\.firstAttemptAt)]
    }

    static func decode(_ row: PGRow) throws -> Job {
        Job(id: try row.require(0), app: try row.require(1), deviceToken: try row.require(2),
            payload: try row.require(3), pushType: try row.require(4), priority: try row.require(5),
            expiration: try row.get(6), collapseID: try row.get(7), apnsID: try row.get(8),
            dedupeKey: try row.get(9), userID: try row.get(10), environment: try row.get(11),
            runAt: try row.require(12), attempts: try row.require(13), lastError: try row.get(14),
            createdAt: try row.require(15), firstAttemptAt: try row.get(16))
    }
}

extension JobQueue {
    /// What a claim leaves to other instances: per app, the environment whose jobs are left
    /// (with every such app's own environment, where a job goes that names none and whose
    /// token is not registered), and the apps whose pushes of a type APNs takes only with token
    /// authentication are left (this instance has only a certificate for them).
    public struct Leaving: Sendable, Equatable {
        /// App → the environment whose jobs are left.
        public var environments: [String: String]
        /// App → its configured environment.
        public var home: [String: String]
        /// Apps whose pushes of a type in `tokenOnlyPushTypes` are left.
        public var tokenOnly: Set<String>
        /// The `apns-push-type` values APNs takes only with token authentication.
        public var tokenOnlyPushTypes: [String]

        public init(environments: [String: String] = [:], home: [String: String] = [:],
                    tokenOnly: Set<String> = [], tokenOnlyPushTypes: [String] = []) {
            self.environments = environments
            self.home = home
            self.tokenOnly = tokenOnly
            self.tokenOnlyPushTypes = tokenOnlyPushTypes
        }

        public var isEmpty: Bool { environments.isEmpty && tokenOnly.isEmpty }

        /// Whether some work of `app` is left.
        public func leaves(_ app: String) -> Bool { environments[app] != nil || tokenOnly.contains(app) }

        /// The left environment, the home environment and the token-only flag of each of
        /// `apps`, then the token-only push types: the parameters after the apps of the
        /// statements that take a `Leaving`.
        func parameters(_ apps: [String]) -> [any PGParameter] {
            [apps.map { environments[$0] }, apps.map { home[$0] ?? "" },
             apps.map { tokenOnly.contains($0) ? "t" : nil }, tokenOnlyPushTypes]
        }
    }
}
