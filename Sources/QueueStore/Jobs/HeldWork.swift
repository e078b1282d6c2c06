import Posix

/// Work put back because a scope of its app was held (APNs refused the app's configuration for
/// it: TopicDisallowed, FeatureNotEnabled, CannotCreateChannelConfig). It waits unspent, with
/// `errorPrefix` before the reason in its error (outcome for channel requests): transactional
/// jobs until the hold ends (`deferJobs`), broadcasts and channel requests 30 s at a time.
public struct HeldWork: Sendable {
    /// What a held job's, broadcast's or channel request's error begins with.
    public static let errorPrefix = "sending held: "
    /// What the error of a parked campaign target begins with when the answer to it paused its
    /// app (its credentials were refused).
    public static let pausedPrefix = "sending paused: "
    /// What the error (outcome for channel requests) of a job, broadcast or channel request
    /// begins with when it was put back because its app's sending was paused (its credentials
    /// refused): it waits 30 s at a time, unclaimed while the pause lasts (`releasePaused`).
    public static let appPausedPrefix = "app paused: "

    public init() {}

    /// Makes every held job, broadcast, channel request and parked campaign target of `app` due
    /// now (parked targets of a paused app too): its hold ended (the operator fixed the
    /// configuration and sent SIGHUP), so it goes out at once instead of after the rest of its wait. A broadcast or channel request being sent (its lease has
    /// not ended) is left alone: made due, another instance could send it again meanwhile.
    /// Returns how many rows became due.
    @discardableResult
    public func release(_ connection: PGConnection, app: String) throws -> Int {
        try connection.query(connection.prepared("""
            WITH jobs AS (
                UPDATE pushd.jobs SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(last_error, $2) RETURNING 1
            ), broadcasts AS (
                UPDATE pushd.broadcast_jobs SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(last_error, $2) AND \(BroadcastQueue.notLeased) RETURNING 1
            ), channel_requests AS (
                UPDATE pushd.channels SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(outcome, $2) AND \(BroadcastQueue.notLeased)
                  AND state IN ('pending_create', 'pending_delete') RETURNING 1
            ), targets AS (
                UPDATE pushd.campaign_retries r SET due_at = now()
                FROM pushd.campaigns c
                WHERE c.id = r.campaign_id AND c.app = $1 AND r.due_at > now()
                  AND (starts_with(r.last_error, $2) OR starts_with(r.last_error, $3)) RETURNING 1
            )
            SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM broadcasts) + (SELECT count(*) FROM channel_requests)
                 + (SELECT count(*) FROM targets)
            """), [app, Self.errorPrefix, Self.pausedPrefix]).require(Int.self, row: 0, column: 0)
    }

    /// Makes every job, broadcast, channel request and parked campaign target `app` put back
    /// for its pause due now (`appPausedPrefix`, and `pausedPrefix` for parked targets): the app
    /// was resumed (a reload fixed its credentials), so they go out at once instead of after the
    /// rest of their wait. Jobs and targets in batches of `batch` rows, each statement on its
    /// own and passing over rows another claimer's open batch holds (as `JobQueue.makeDue`):
    /// an app paused for long has a large backlog put back. Returns how many rows became due.
    @discardableResult
    public func releasePaused(_ connection: PGConnection, app: String, batch: Int = 10_000) throws -> Int {
        try JobQueue().makeDue(connection, app: app, errorPrefixes: [Self.appPausedPrefix], batch: batch)
            + BroadcastQueue().makeDue(connection, app: app, errorPrefixes: [Self.appPausedPrefix])
            + ChannelStore().makeDue(connection, app: app, outcomePrefixes: [Self.appPausedPrefix])
            + CampaignStore().makeParkedDue(connection, app: app, errorPrefixes: [Self.pausedPrefix], batch: batch)
    }

    /// Puts the due jobs of one held topic scope of `app` back until `until`, set-based: up to
    /// `limit` rows in one `UPDATE` (call again while it returns `limit`). The scope is the
    /// jobs of `pushTypes` (the push types whose topic is the held one) whose environment is
    /// `environment`: the job's own, else its token's registered one, else `appEnvironment`,
    /// as the sender decides. Rows in another claimer's open batch are skipped (that batch puts
    /// its own back); jobs scheduled for later are left alone (they come due and are held then).
    /// Costs one row write per job for the whole hold, instead of a delete and an insert per job
    /// every time its wait ends. Returns how many jobs it put back.
    @discardableResult
    public func deferJobs(_ connection: PGConnection, app: String, pushTypes: [String], environment: String,
                          appEnvironment: String, until: Timestamp, reason: String, limit: Int) throws -> Int {
        guard !pushTypes.isEmpty, limit > 0 else { return 0 }
        return try connection.query(connection.prepared("""
            WITH scope AS (
                SELECT j.id FROM pushd.jobs j
                WHERE j.app = $1 AND j.run_at <= now() AND j.push_type = ANY ($2::text[])
                  AND coalesce(j.environment,
                               (SELECT d.environment FROM pushd.device_tokens d WHERE d.app = j.app AND d.token = j.device_token),
                               $4) = $3
                LIMIT $7 FOR UPDATE SKIP LOCKED
            ), deferred AS (
                UPDATE pushd.jobs SET run_at = $5, last_error = $6 FROM scope WHERE pushd.jobs.id = scope.id RETURNING 1
            )
            SELECT count(*) FROM deferred
            """), [app, pushTypes, environment, appEnvironment, until, Self.errorPrefix + reason, limit])
            .require(Int.self, row: 0, column: 0)
    }
}
