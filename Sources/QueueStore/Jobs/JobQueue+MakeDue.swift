import Posix

/// Making waiting jobs due at once: after an outage of APNs (`makeDue`), while it lasts (the
/// probe, `makeSoonestDue`), and after a pause or a hold (`HeldWork`).
extension JobQueue {
    /// Makes the waiting jobs of `app` whose `last_error` begins with one of `errorPrefixes` due
    /// now, and returns how many: jobs that waited out an outage of APNs go out as soon as it
    /// answers again rather than after the rest of their backoff. Jobs scheduled for later
    /// by their sender (no error) and jobs in another claimer's open batch are left alone.
    /// `batch` rows per statement, each committed on its own: after a long outage millions
    /// wait, and one UPDATE of them all outran the statement timeout, rolled back, and was
    /// tried again on every turn while nothing became due. `environment`: only the jobs going
    /// there (nil: every environment).
    ///
    /// A job a CHECK refuses to write (one added NOT VALID after it was queued) goes to dead
    /// letters instead of failing its whole batch, every time (`RefusedRewrite`); `onRefused`
    /// is given those, once, at the end.
    @discardableResult
    public func makeDue(_ connection: PGConnection, app: String, environment: OutageEnvironment? = nil, errorPrefixes: [String],
                        batch: Int = 10_000, onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        guard !errorPrefixes.isEmpty else { return 0 }
        precondition(batch > 0, "a batch of \(batch) rows")
        // In (priority, run_at, id) order, each batch after the last job the previous one took:
        // the jobs of the app the filter leaves (going to the other environment, which may still
        // be down, or waiting for another reason) are read once, not again in every batch.
        let waiting = """
            SELECT q.id, q.priority, q.run_at::text AS after, q.run_at FROM pushd.jobs q
            WHERE q.app = $1 AND (q.priority, q.run_at, q.id) > ($6::smallint, $7::timestamptz, $8::bigint)
              AND q.run_at > now() AND q.last_error ^@ ANY ($2::text[])
              AND \(OutageEnvironment.matches(Self.destination(home: "$4::text"), parameter: 3))
            ORDER BY q.priority, q.run_at, q.id
            LIMIT $5 FOR UPDATE OF q SKIP LOCKED
            """
        let statement = """
            WITH taken AS (\(waiting)),
                 due AS (UPDATE pushd.jobs j SET run_at = now() FROM taken WHERE j.id = taken.id RETURNING 1)
            SELECT (SELECT count(*) FROM due), last.priority, last.after, last.id
            FROM (SELECT 1) one
            LEFT JOIN LATERAL (SELECT priority, after, id FROM taken ORDER BY priority DESC, run_at DESC, id DESC LIMIT 1) last ON true
            """
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        // The run_at as the server wrote it, so that the next batch starts exactly after it.
        var after: (priority: Int16, runAt: String, id: Int64) = (Int16.min, "-infinity", Int64.min)
        var total = 0
        while true {
            let parameters: [any PGParameter] = [app, errorPrefixes, environment?.name, environment?.home[app] ?? "", batch,
                                                 after.priority, after.runAt, after.id]
            var handled: Int
            do {
                let result = try connection.query(connection.prepared(statement), parameters)
                let written = try result.require(Int.self, row: 0, column: 0)
                total += written
                handled = written
                if let id = try result.get(Int64.self, row: 0, column: 3) {
                    after = (try result.require(Int16.self, row: 0, column: 1), try result.require(String.self, row: 0, column: 2), id)
                }
            } catch let error as PGError where error.code == .checkViolation {
                // One by one, to find the rows the check refuses (`rewrite`).
                let rows = try connection.query(connection.prepared(waiting), parameters)
                handled = 0
                for index in 0..<rows.rowCount {
                    let id = try rows.require(Int64.self, row: index, column: 0)
                    after = (try rows.require(Int16.self, row: index, column: 1), try rows.require(String.self, row: index, column: 2), id)
                    do {
                        let written = try connection.rowsUpdated(by: Self.makeOneDueSQL, [id])
                        total += written
                        handled += written
                    } catch let error as PGError where error.code == .checkViolation {
                        if let item = try Self.deadLetterRefused(connection, id: id, doing: "made due again", withError: true, error: error) {
                            refused.append(item)
                            handled += 1
                        }
                    }
                }
            }
            if handled < batch { return total }
        }
    }

    /// Makes one waiting job (`$1`) due now, unless it is due already or in another claimer's batch.
    static let makeOneDueSQL = """
        UPDATE pushd.jobs SET run_at = now() WHERE id = (SELECT id FROM pushd.jobs WHERE id = $1 AND run_at > now() FOR UPDATE SKIP LOCKED)
        """

    /// Where a job `q` goes, as the sender resolves it (`AppSender.environment`): its own
    /// environment, else its token's registered one, else its app's, `home`.
    static func destination(home: String) -> String {
        """
        coalesce(q.environment, (SELECT d.environment FROM pushd.device_tokens d
                                 WHERE d.app = q.app AND d.token = lower(q.device_token)), \(home))
        """
    }

    /// Makes the one waiting job of each of `apps` that is due soonest, among those whose
    /// `last_error` begins with one of `errorPrefixes`, due now, and returns how many: while APNs
    /// is down for an app, its answer to this one send is what shows it is back (then `makeDue`
    /// sends the rest), rather than the end of a backoff that grew with the outage. One index
    /// probe per app and priority, stopping at the first match: cheap however many jobs wait.
    /// Jobs scheduled for later by their sender (no error) are left alone. `environment`: only
    /// jobs going there (nil: every environment).
    ///
    /// A job a CHECK refuses to write goes to dead letters (as in `makeDue`) and the probe of
    /// its app takes the next one.
    @discardableResult
    public func makeSoonestDue(_ connection: PGConnection, apps: [String], environment: OutageEnvironment? = nil,
                               errorPrefixes: [String], onRefused: ([RefusedRewrite]) -> Void = { _ in }) throws -> Int {
        var refused = [RefusedRewrite]()
        defer { if !refused.isEmpty { onRefused(refused) } }
        var total = 0
        var probing = apps
        // Each turn but the last dead-letters at least one job; a few turns are plenty.
        for _ in 0..<8 where !probing.isEmpty && !errorPrefixes.isEmpty {
            let soonest = """
                SELECT DISTINCT ON (a.app) j.id
                FROM unnest($1::text[], $4::text[]) AS a(app, home)
                CROSS JOIN (VALUES (10::smallint), (5::smallint), (1::smallint)) AS p(priority)
                CROSS JOIN LATERAL (
                    SELECT q.id, q.run_at FROM pushd.jobs q
                    WHERE q.app = a.app AND q.priority = p.priority AND q.run_at > now() AND q.last_error ^@ ANY ($2::text[])
                      AND \(OutageEnvironment.matches(Self.destination(home: "a.home"), parameter: 3))
                    ORDER BY q.run_at LIMIT 1) j
                ORDER BY a.app, j.run_at
                """
            let before = refused.count
            total += try Self.rewrite(connection, "UPDATE pushd.jobs SET run_at = now() WHERE id IN (\(soonest))",
                                      [probing, errorPrefixes, environment?.name, OutageEnvironment.homes(environment, apps: probing)],
                                      candidates: soonest, row: Self.makeOneDueSQL, [], doing: "made due again", withError: true,
                                      refused: &refused).written
            probing = Array(Set(refused[before...].map(\.app))).sorted()
        }
        return total
    }
}
