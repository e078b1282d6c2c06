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
    ///
    /// One statement per table: a job or broadcast a CHECK refuses to write (one added NOT VALID
    /// after it was queued) goes to dead letters (`RefusedRewrite`, given to `onRefused`) and the
    /// rest are made due, where one statement for all would fail as a whole.
    @discardableResult
    public func release(_ connection: PGConnection, app: String, onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        let jobs = "SELECT id FROM pushd.jobs WHERE app = $1 AND run_at > now() AND starts_with(last_error, $2) FOR UPDATE SKIP LOCKED"
        var due = try JobQueue.rewrite(connection, "UPDATE pushd.jobs SET run_at = now() WHERE id IN (\(jobs))", [app, Self.errorPrefix],
                                       candidates: jobs, row: JobQueue.makeOneDueSQL, [], doing: "made due again", withError: true,
                                       refused: &refused).written
        due += try BroadcastQueue().makeDue(connection, app: app, errorPrefixes: [Self.errorPrefix], onRefused: { refused += $0 })
        return due + (try connection.query(connection.prepared("""
            WITH channel_requests AS (
                UPDATE pushd.channels SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(outcome, $2) AND \(BroadcastQueue.notLeased)
                  AND state IN ('pending_create', 'pending_delete') RETURNING 1
            ), targets AS (
                UPDATE pushd.campaign_retries r SET due_at = now()
                FROM pushd.campaigns c
                WHERE c.id = r.campaign_id AND c.app = $1 AND r.due_at > now()
                  AND (starts_with(r.last_error, $2) OR starts_with(r.last_error, $3)) RETURNING 1
            )
            SELECT (SELECT count(*) FROM channel_requests) + (SELECT count(*) FROM targets)
            """), [app, Self.errorPrefix, Self.pausedPrefix]).require(Int.self, row: 0, column: 0))
    }

    /// Makes every job, broadcast, channel request and parked campaign target `app` put back
    /// for its pause due now (`appPausedPrefix`, and `pausedPrefix` for parked targets): the app
    /// was resumed (a reload fixed its credentials), so they go out at once instead of after the
    /// rest of their wait. Jobs and targets in batches of `batch` rows, each statement on its
    /// own and passing over rows another claimer's open batch holds (as `JobQueue.makeDue`):
    /// an app paused for long has a large backlog put back. Returns how many rows became due.
    /// A job or broadcast a CHECK refuses to write goes to dead letters, as in `release`.
    @discardableResult
    public func releasePaused(_ connection: PGConnection, app: String, batch: Int = 10_000,
                              onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        return try JobQueue().makeDue(connection, app: app, errorPrefixes: [Self.appPausedPrefix], batch: batch, onRefused: { refused += $0 })
            + BroadcastQueue().makeDue(connection, app: app, errorPrefixes: [Self.appPausedPrefix], onRefused: { refused += $0 })
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
    ///
    /// A job a CHECK refuses to write (one added NOT VALID after it was queued) goes to dead
    /// letters (`RefusedRewrite`, given to `onRefused`) and the rest are put back; the count
    /// returned leaves it out (call again while the count and the refused make `limit`).
    @discardableResult
    public func deferJobs(_ connection: PGConnection, app: String, pushTypes: [String], environment: String,
                          appEnvironment: String, until: Timestamp, reason: String, limit: Int,
                          onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        guard !pushTypes.isEmpty, limit > 0 else { return 0 }
        let scope = """
            SELECT j.id FROM pushd.jobs j
            WHERE j.app = $1 AND j.run_at <= now() AND j.push_type = ANY ($2::text[])
              AND coalesce(j.environment,
                           (SELECT d.environment FROM pushd.device_tokens d WHERE d.app = j.app AND d.token = j.device_token),
                           $4) = $3
            LIMIT $5 FOR UPDATE SKIP LOCKED
            """
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        let error = Self.errorPrefix + reason
        let parameters: [any PGParameter] = [app, pushTypes, environment, appEnvironment, limit]
        return try JobQueue.rewrite(connection, "UPDATE pushd.jobs SET run_at = $6, last_error = $7 WHERE id IN (\(scope))",
                                    parameters + [until, error], candidates: scope, parameters,
                                    row: """
                                        UPDATE pushd.jobs SET run_at = $2, last_error = $3
                                        WHERE id = (SELECT id FROM pushd.jobs WHERE id = $1 AND run_at <= now() FOR UPDATE SKIP LOCKED)
                                        """, [until, error],
                                    doing: "put back for its held topic (\(error))", withError: false, refused: &refused).written
    }
}
