import Posix

/// Work put back because a scope of its app was held (APNs refused the app's configuration for
/// it: TopicDisallowed, FeatureNotEnabled, CannotCreateChannelConfig). It waits unspent, due
/// again a while later, with `errorPrefix` before the reason in its error (outcome for channel
/// requests).
public struct HeldWork: Sendable {
    /// What a held job's, broadcast's or channel request's error begins with.
    public static let errorPrefix = "sending held: "

    public init() {}

    /// Makes every held job, broadcast and channel request of `app` due now: its hold ended
    /// (the operator fixed the configuration and sent SIGHUP), so it goes out at once instead
    /// of after the rest of its wait. Returns how many rows became due.
    @discardableResult
    public func release(_ connection: PGConnection, app: String) throws -> Int {
        try connection.query(connection.prepared("""
            WITH jobs AS (
                UPDATE pushd.jobs SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(last_error, $2) RETURNING 1
            ), broadcasts AS (
                UPDATE pushd.broadcast_jobs SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(last_error, $2) RETURNING 1
            ), channel_requests AS (
                UPDATE pushd.channels SET run_at = now()
                WHERE app = $1 AND run_at > now() AND starts_with(outcome, $2)
                  AND state IN ('pending_create', 'pending_delete') RETURNING 1
            )
            SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM broadcasts) + (SELECT count(*) FROM channel_requests)
            """), [app, Self.errorPrefix]).require(Int.self, row: 0, column: 0)
    }
}
