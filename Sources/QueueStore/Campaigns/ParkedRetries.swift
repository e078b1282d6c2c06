import Posix

/// A campaign target waiting for its retry outside any chunk, in `pushd.campaign_retries`.
public struct ParkedTarget: Sendable, Hashable {
    public var campaignID: Int64
    public var chunk: Int
    /// The target's position within its chunk.
    public var position: Int
    public var token: String
    /// Overrides the campaign's payload when present.
    public var payload: String?
    public var dueAt: Timestamp
    /// Attempts used up so far (answers that blamed the request).
    public var attempts: Int
    /// Retry windows and the outage budget count from here.
    public var firstAttemptAt: Timestamp
    public var lastError: String
    /// The environment it was sent to (a registered token's), nil for the campaign's own.
    public var environment: String?

    public init(campaignID: Int64, chunk: Int, position: Int, token: String, payload: String?, dueAt: Timestamp,
                attempts: Int, firstAttemptAt: Timestamp, lastError: String, environment: String? = nil) {
        self.campaignID = campaignID
        self.chunk = chunk
        self.position = position
        self.token = token
        self.payload = payload
        self.dueAt = dueAt
        self.attempts = attempts
        self.firstAttemptAt = firstAttemptAt
        self.lastError = lastError
        self.environment = environment
    }
}

/// A parked target's place in its campaign: its row's key with the campaign's id.
public struct ParkedPlace: Sendable, Hashable {
    public var chunk: Int
    public var position: Int

    public init(chunk: Int, position: Int) {
        self.chunk = chunk
        self.position = position
    }
}

extension ParkedTarget {
    public var place: ParkedPlace { ParkedPlace(chunk: chunk, position: position) }
}

/// Due parked targets of one campaign with what to send them, locked (not removed) in a
/// transaction that stays open on the claiming connection until `settleParked`: if the worker
/// dies first, the targets stay parked as they were.
public struct ParkedBatch: Sendable, Hashable {
    public var campaignID: Int64
    public var app: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    public var expiration: Timestamp?
    public var payload: String?
    public var rateLimit: Int?
    public var targets: [ParkedTarget]
    /// The id of the transaction that holds the targets (`TransactionFate.currentIDSQL`), nil
    /// when none does: asked about on a new session when its session ends while it commits.
    public var transaction: Int64? = nil
}

/// What became of a parked batch: counts for the campaign, and the targets to park again.
public struct ParkedOutcomes: Sendable, Hashable {
    public var sent: Int = 0
    public var failedByReason: [String: Int] = [:]
    public var pruned: Int = 0
    /// 410 answers whose token was registered again after APNs' timestamp, so it was kept.
    public var keptTokens: Int = 0
    /// Targets of the batch that wait again, with their new due time, attempts and error; the
    /// batch's other targets are done with.
    public var retries: [ParkedTarget] = []
    /// The targets counted in `sent`, and those in `failedByReason` with their reason, when
    /// counted with `sent(_:)` and `failed(_:reason:)`: what `restricted(to:)` keeps.
    public var sentPlaces: Set<ParkedPlace> = []
    public var failedPlaces: [ParkedPlace: String] = [:]

    public init() {}

    /// Counts `target` as sent.
    public mutating func sent(_ target: ParkedTarget) {
        sent += 1
        sentPlaces.insert(target.place)
    }

    /// Counts `target` as failed for `reason` (a pruned token's target too).
    public mutating func failed(_ target: ParkedTarget, reason: String) {
        failedByReason[reason, default: 0] += 1
        failedPlaces[target.place] = reason
    }

    /// The outcomes of the targets at `places` only (those a batch taken back in part holds,
    /// `CampaignStore.retakeParked`); `pruned` and `keptTokens` are left at 0, to be counted
    /// from its prunes written again.
    public func restricted(to places: Set<ParkedPlace>) -> ParkedOutcomes {
        var kept = ParkedOutcomes()
        for place in sentPlaces where places.contains(place) {
            kept.sent += 1
            kept.sentPlaces.insert(place)
        }
        for (place, reason) in failedPlaces where places.contains(place) {
            kept.failedByReason[reason, default: 0] += 1
            kept.failedPlaces[place] = reason
        }
        kept.retries = retries.filter { places.contains($0.place) }
        return kept
    }

    public var failed: Int { failedByReason.values.reduce(0, +) }

    /// Whether there is anything to add to the campaign's counters.
    public var hasCounts: Bool { sent + failed + pruned + keptTokens > 0 }

    /// These counts without the retries: what a settle that could not count leaves owed.
    public var counts: ParkedOutcomes {
        var counts = self
        counts.retries = []
        return counts
    }

    /// Adds `other`'s counts (not its retries) to these.
    public mutating func addCounts(_ other: ParkedOutcomes) {
        sent += other.sent
        failedByReason.merge(other.failedByReason, uniquingKeysWith: +)
        pruned += other.pruned
        keptTokens += other.keptTokens
    }
}

/// A parked batch was settled (its done targets removed, its retries parked again, all
/// committed) but its campaign's counters were not written: the count waited `lock_timeout`
/// for the campaign's row, which another session held, or the database refused it otherwise.
/// No target of the batch is sent again; `counts` are the caller's to write again with
/// `CampaignStore.countParked` once the row is free.
public struct ParkedCountsNotWritten: Error, CustomStringConvertible {
    public var campaignID: Int64
    public var counts: ParkedOutcomes
    public var error: PGError

    public var description: String {
        "the counters of campaign \(campaignID) were not written for a settled parked batch (\(counts.sent) sent, \(counts.failed) failed): \(error)"
    }
}

/// Parking: a chunk whose fresh targets are all sent but some of whose targets wait for a
/// retry does not hold its worker. The waiting targets are written here in the transaction
/// that finishes the chunk, and any worker sends them once they are due. A campaign is done
/// when its last chunk is finished and nothing of it is parked.
extension CampaignStore {
    static let parkSQL = """
        INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, payload, due_at, attempts, first_attempt_at, last_error,
                                            environment)
        SELECT * FROM unnest($1::bigint[], $2::integer[], $3::integer[], $4::text[], $5::text[], $6::timestamptz[],
                             $7::integer[], $8::timestamptz[], $9::text[], $10::text[])
        ON CONFLICT (campaign_id, chunk, position) DO UPDATE
        SET due_at = EXCLUDED.due_at, attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error
        """

    /// One campaign's due parked targets, oldest due first; the campaign must be running and
    /// of one of `apps`. The campaign is that of the oldest due target no other batch holds:
    /// picked by a locked row, a claim would find all its rows held and claim nothing, while
    /// other campaigns' retries waited for that batch to end. The rows are locked, not deleted: the settle deletes those done with
    /// and updates those that wait again, and neither needs the campaign's row (a deleted
    /// row could only come back with the whole transaction's rollback).
    static let claimParkedSQL = """
        WITH picked AS (
            SELECT r.campaign_id FROM pushd.campaign_retries r
            JOIN pushd.campaigns k ON k.id = r.campaign_id AND k.status = 'running' AND k.app = ANY ($2::text[])
            WHERE r.due_at <= now() AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals h WHERE h.campaign_id = k.id) ORDER BY r.due_at LIMIT 1
            FOR UPDATE OF r SKIP LOCKED
        )
        SELECT r.campaign_id, r.chunk, r.position, r.token, r.payload, r.due_at, r.attempts, r.first_attempt_at, r.last_error,
               r.environment
        FROM pushd.campaign_retries r, picked
        WHERE r.campaign_id = picked.campaign_id AND r.due_at <= now()
        ORDER BY r.due_at LIMIT $1 FOR UPDATE OF r SKIP LOCKED
        """

    /// The parked claim of an instance that leaves some work of some apps to other instances
    /// (`JobQueue.Leaving`, as the transactional claim): `$3` names per app of `$2` the
    /// environment it leaves (NULL: none), `$4` is the app's own environment, `$5` is 't' for
    /// an app whose campaigns of a push type in `$6` (those APNs takes only with token
    /// authentication) it leaves. A target's environment is the one it was parked with, else
    /// its campaign's, else its app's, as the sender computes it; the targets of the left
    /// environment, or of a left push type, stay parked, due, for an instance that can send them.
    static let claimParkedLeavingSQL = """
        WITH picked AS (
            SELECT r.campaign_id FROM pushd.campaign_retries r
            JOIN pushd.campaigns k ON k.id = r.campaign_id AND k.status = 'running'
            JOIN unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS a(app, leave, home, token_only) ON a.app = k.app
            WHERE r.due_at <= now() AND \(parkedNotLeft) AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals h WHERE h.campaign_id = k.id)
            ORDER BY r.due_at LIMIT 1 FOR UPDATE OF r SKIP LOCKED
        )
        SELECT r.campaign_id, r.chunk, r.position, r.token, r.payload, r.due_at, r.attempts, r.first_attempt_at, r.last_error,
               r.environment
        FROM pushd.campaign_retries r
        JOIN picked ON picked.campaign_id = r.campaign_id
        JOIN pushd.campaigns k ON k.id = r.campaign_id
        JOIN unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS a(app, leave, home, token_only) ON a.app = k.app
        WHERE r.due_at <= now() AND \(parkedNotLeft)
        ORDER BY r.due_at LIMIT $1 FOR UPDATE OF r SKIP LOCKED
        """

    /// A parked target `r` of campaign `k` of app `a` does not go to the environment `a.leave`,
    /// nor is it of a push type in `$6` when `a.token_only` is set.
    static let parkedNotLeft = """
        (a.leave IS NULL OR coalesce(r.environment, k.environment, a.home) IS DISTINCT FROM a.leave)
        AND (a.token_only IS NULL OR k.push_type <> ALL ($6::text[]))
        """

    /// The targets of a settled batch that wait again (`$1`, `$2`–`$6` per target): only
    /// their own rows, which the claim locked, are written; the FOREIGN KEY's check on the
    /// campaign's row runs only when its key changes, so a lock on that row does not stop it.
    static let keepParkedSQL = """
        UPDATE pushd.campaign_retries r SET due_at = u.due_at, attempts = u.attempts, last_error = u.last_error
        FROM unnest($2::integer[], $3::integer[], $4::timestamptz[], $5::integer[], $6::text[])
             AS u(chunk, position, due_at, attempts, last_error)
        WHERE r.campaign_id = $1 AND r.chunk = u.chunk AND r.position = u.position
        """

    /// The targets of a settled batch that are done with (sent, failed, pruned).
    static let dropSettledParkedSQL = """
        DELETE FROM pushd.campaign_retries r USING unnest($2::integer[], $3::integer[]) AS d(chunk, position)
        WHERE r.campaign_id = $1 AND r.chunk = d.chunk AND r.position = d.position
        """

    /// The counts go to the campaign's hold while a CHECK refuses its row (`CampaignRefusal`).
    static let countParkedSQL = """
        WITH held AS (
            UPDATE pushd.campaign_refusals h
            SET sent = h.sent + $2, failed = h.failed + $3, pruned = h.pruned + $4, pruned_kept = h.pruned_kept + $7,
                failed_by_reason = CASE WHEN cardinality($5::text[]) = 0 THEN h.failed_by_reason
                    ELSE pushd.add_counts(h.failed_by_reason,
                        (SELECT jsonb_object_agg(r, n) FROM unnest($5::text[], $6::bigint[]) AS u(r, n))) END
            WHERE h.campaign_id = $1
            RETURNING h.campaign_id
        )
        UPDATE pushd.campaigns k
        SET sent = k.sent + $2, failed = k.failed + $3, pruned = k.pruned + $4, pruned_kept = k.pruned_kept + $7,
            failed_by_reason = CASE WHEN cardinality($5::text[]) = 0 THEN k.failed_by_reason
                ELSE pushd.add_counts(k.failed_by_reason,
                    (SELECT jsonb_object_agg(r, n) FROM unnest($5::text[], $6::bigint[]) AS u(r, n))) END
        WHERE k.id = $1 AND NOT EXISTS (SELECT 1 FROM held)
        """

    /// Running campaigns whose chunks are all finished and of which nothing is parked (and
    /// whose row no CHECK refuses: a held campaign is closed when its hold ends).
    static let closeSQL = """
        UPDATE pushd.campaigns k SET status = 'done', finished_at = now()
        WHERE k.status = 'running' AND k.chunks_done >= k.chunks_total AND k.chunks_total > 0
          AND NOT EXISTS (SELECT 1 FROM pushd.campaign_retries r WHERE r.campaign_id = k.id)
          AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals h WHERE h.campaign_id = k.id)
          AND ($1::bigint IS NULL OR k.id = $1)
        RETURNING k.id
        """

    /// Parks `parked` and finishes the chunk, in one transaction: the chunk is never finished
    /// without its waiting targets parked.
    @discardableResult
    public func finish(_ connection: PGConnection, _ chunk: CampaignChunk, _ progress: ChunkProgress,
                       parking parked: [ParkedTarget]) throws -> ChunkDirective {
        try parking(parked, campaignID: chunk.campaignID, on: connection) { try finish(connection, chunk, progress) }
    }

    /// Parks `parked` and releases the chunk at `progress.position`, in one transaction: a
    /// chunk stopped early (a pause, a hold, a shutdown) is released past every target it
    /// sent, those waiting for a retry parked, so that none is sent again by the worker that
    /// leases it next.
    @discardableResult
    public func release(_ connection: PGConnection, _ chunk: CampaignChunk, _ progress: ChunkProgress,
                        parking parked: [ParkedTarget]) throws -> ChunkDirective {
        try parking(parked, campaignID: chunk.campaignID, on: connection) { try release(connection, chunk, progress) }
    }

    /// Runs `record` (which finishes or releases a chunk of campaign `campaignID`) in one
    /// transaction with parking `parked`. When a CHECK refuses the campaign's row, the campaign
    /// is held (`CampaignRefusal`) and the transaction done again: the chunk's progress and its
    /// parked targets are written, its counts kept with the hold.
    private func parking(_ parked: [ParkedTarget], campaignID: Int64, on connection: PGConnection,
                         _ record: () throws -> ChunkDirective) throws -> ChunkDirective {
        do {
            return try parkingOnce(parked, on: connection, record)
        } catch let error as PGError where error.code == .checkViolation && !connection.isInTransaction && !parked.isEmpty {
            try hold(connection, campaignID: campaignID, refusedBy: error)
            return try parkingOnce(parked, on: connection, record)
        }
    }

    /// In the caller's transaction (a chunk's prunes with it, whose fate the caller asks after
    /// a lost COMMIT), under a savepoint: the caller commits or rolls back.
    private func parkingOnce(_ parked: [ParkedTarget], on connection: PGConnection,
                             _ record: () throws -> ChunkDirective) throws -> ChunkDirective {
        if parked.isEmpty { return try record() }
        let own = !connection.isInTransaction
        try connection.execute(script: own ? "BEGIN" : "SAVEPOINT pushd_parking")
        do {
            try park(connection, parked)
            let directive = try record()
            // A lost lease means another worker sends this chunk again, its waiting targets
            // included: park nothing.
            if own {
                try connection.execute(script: directive == .leaseLost ? "ROLLBACK" : "COMMIT")
            } else {
                try connection.execute(script: directive == .leaseLost
                    ? "ROLLBACK TO SAVEPOINT pushd_parking; RELEASE SAVEPOINT pushd_parking" : "RELEASE SAVEPOINT pushd_parking")
            }
            return directive
        } catch {
            if own, connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
    }

    func park(_ connection: PGConnection, _ parked: [ParkedTarget]) throws {
        try connection.query(connection.prepared(Self.parkSQL), [
            parked.map(\.campaignID), parked.map { Int32(clamping: $0.chunk) }, parked.map { Int32(clamping: $0.position) },
            parked.map(\.token), parked.map(\.payload), parked.map(\.dueAt), parked.map { Int32(clamping: $0.attempts) },
            parked.map(\.firstAttemptAt), parked.map(\.lastError), parked.map(\.environment),
        ])
    }

    /// Makes the parked targets of `app`'s campaigns whose `last_error` begins with one of
    /// `errorPrefixes` due now, and returns how many: targets that waited out an outage of
    /// APNs are sent as soon as it answers again (as `JobQueue.makeDue` does for jobs).
    /// Targets in another worker's open batch are left alone. `environment`: only targets
    /// going there (where they were sent, else their campaign's environment, else their app's;
    /// nil: every environment).
    @discardableResult
    public func makeParkedDue(_ connection: PGConnection, app: String, environment: OutageEnvironment? = nil, errorPrefixes: [String],
                              batch: Int = 10_000) throws -> Int {
        guard !errorPrefixes.isEmpty else { return 0 }
        precondition(batch > 0, "a batch of \(batch) rows")
        // In batches, each committed on its own, as `JobQueue.makeDue`, and like it each batch
        // after the last target the previous one took (in due_at order): the targets the
        // filter leaves (of the other environment, of other apps) are read once, not again in
        // every batch.
        let statement = """
            WITH taken AS (
                SELECT r.campaign_id, r.chunk, r.position, r.due_at, r.due_at::text AS after
                FROM pushd.campaign_retries r JOIN pushd.campaigns c ON c.id = r.campaign_id
                WHERE c.app = $1 AND (r.due_at, r.campaign_id, r.chunk, r.position) > ($6::timestamptz, $7::bigint, $8::integer, $9::integer)
                  AND r.due_at > now() AND r.last_error ^@ ANY ($2::text[])
                  AND \(OutageEnvironment.matches("coalesce(r.environment, c.environment, $4::text)", parameter: 3))
                ORDER BY r.due_at, r.campaign_id, r.chunk, r.position
                LIMIT $5 FOR UPDATE OF r SKIP LOCKED
            ), due AS (
                UPDATE pushd.campaign_retries q SET due_at = now() FROM taken
                WHERE (q.campaign_id, q.chunk, q.position) = (taken.campaign_id, taken.chunk, taken.position) RETURNING 1
            )
            SELECT (SELECT count(*) FROM due), last.after, last.campaign_id, last.chunk, last.position
            FROM (SELECT 1) one
            LEFT JOIN LATERAL (SELECT after, campaign_id, chunk, position FROM taken
                               ORDER BY due_at DESC, campaign_id DESC, chunk DESC, position DESC LIMIT 1) last ON true
            """
        // The due_at as the server wrote it, so that the next batch starts exactly after it.
        var after: (dueAt: String, campaign: Int64, chunk: Int, position: Int) = ("-infinity", Int64.min, Int(Int32.min), Int(Int32.min))
        var total = 0
        while true {
            let result = try connection.query(connection.prepared(statement), [
                app, errorPrefixes, environment?.name, environment?.home[app] ?? "", batch,
                after.dueAt, after.campaign, after.chunk, after.position,
            ])
            let changed = try result.require(Int.self, row: 0, column: 0)
            total += changed
            if changed < batch { return total }
            after = (try result.require(String.self, row: 0, column: 1), try result.require(Int64.self, row: 0, column: 2),
                     try result.require(Int.self, row: 0, column: 3), try result.require(Int.self, row: 0, column: 4))
        }
    }

    /// Makes the one parked target of each of `apps`' running campaigns that is due soonest,
    /// among those whose `last_error` begins with one of `errorPrefixes`, due now, and returns
    /// how many (as `JobQueue.makeSoonestDue` does for jobs): an index walk from now in `due_at`
    /// order, stopping at the first match. `environment`: only targets going there (nil: every
    /// environment).
    @discardableResult
    public func makeSoonestParkedDue(_ connection: PGConnection, apps: [String], environment: OutageEnvironment? = nil,
                                     errorPrefixes: [String]) throws -> Int {
        guard !apps.isEmpty, !errorPrefixes.isEmpty else { return 0 }
        return try connection.rowsUpdated(by: """
            UPDATE pushd.campaign_retries r SET due_at = now()
            FROM (SELECT t.campaign_id, t.chunk, t.position FROM unnest($1::text[], $4::text[]) AS a(app, home)
                  CROSS JOIN LATERAL (
                      SELECT q.campaign_id, q.chunk, q.position FROM pushd.campaign_retries q
                      JOIN pushd.campaigns c ON c.id = q.campaign_id
                      WHERE c.app = a.app AND c.status = 'running' AND q.due_at > now() AND q.last_error ^@ ANY ($2::text[])
                        AND \(OutageEnvironment.matches("coalesce(q.environment, c.environment, a.home)", parameter: 3))
                      ORDER BY q.due_at LIMIT 1) t) probe
            WHERE (r.campaign_id, r.chunk, r.position) = (probe.campaign_id, probe.chunk, probe.position)
            """, [apps, errorPrefixes, environment?.name, OutageEnvironment.homes(environment, apps: apps)])
    }

    /// Takes up to `limit` due parked targets of one running campaign of `apps`, or nil when
    /// none is due. Targets of an environment `leaving` names for their app, and of a campaign
    /// of a token-only push type of an app it names, are left parked for an instance that can
    /// send them. On a batch the connection stays in the claiming
    /// transaction: settle it with `settleParked` on the same connection.
    public func claimParked(_ connection: PGConnection, limit: Int, apps: [String],
                            leaving: JobQueue.Leaving = JobQueue.Leaving()) throws -> ParkedBatch? {
        guard limit > 0 else { throw QueueError("parked claim limit must be positive, got \(limit)") }
        let statement: PGStatement
        var parameters: [any PGParameter] = [limit, apps]
        if leaving.isEmpty {
            statement = try connection.prepared(Self.claimParkedSQL)
        } else {
            statement = try connection.prepared(Self.claimParkedLeavingSQL)
            parameters += leaving.parameters(apps)
        }
        try connection.execute(script: "BEGIN")
        do {
            let result = try connection.query(statement, parameters)
            guard result.rowCount > 0 else {
                try connection.execute(script: "COMMIT")
                return nil
            }
            var targets = [ParkedTarget]()
            targets.reserveCapacity(result.rowCount)
            for row in result.rows {
                targets.append(ParkedTarget(campaignID: try row.require(0), chunk: try row.require(1), position: try row.require(2),
                                            token: try row.require(3), payload: try row.get(4), dueAt: try row.require(5),
                                            attempts: try row.require(6), firstAttemptAt: try row.require(7),
                                            lastError: try row.require(8), environment: try row.get(9)))
            }
            let id = targets[0].campaignID
            let head = try connection.query("""
                SELECT app, push_type, priority, collapse_id, expiration, payload, rate_limit, \(TransactionFate.currentIDSQL)
                FROM pushd.campaigns WHERE id = $1
                """, [id])
            guard head.rowCount == 1 else { throw QueueError("parked targets name campaign \(id), which does not exist") }
            let row = head[0]
            return ParkedBatch(campaignID: id, app: try row.require(0), pushType: try row.require(1), priority: try row.require(2),
                               collapseID: try row.get(3), expiration: try row.get(4), payload: try row.get(5),
                               rateLimit: try row.get(6), targets: targets, transaction: try row.require(7))
        } catch {
            if connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
    }

    /// The claim's lock, by place, of the targets of a parked batch whose claiming transaction
    /// ended (its session was cut, or its COMMIT failed): those still parked as the claim found
    /// them (`$2`–`$5`). One another claimer holds is skipped; one settled since is gone, or
    /// parked again with a later due time.
    static let retakeParkedSQL = """
        SELECT r.chunk, r.position, \(TransactionFate.currentIDSQL)
        FROM pushd.campaign_retries r JOIN \(parkedAsClaimed) ON r.chunk = c.chunk AND r.position = c.position
        WHERE r.campaign_id = $1 AND \(parkedStillAsClaimed)
        FOR UPDATE OF r SKIP LOCKED
        """

    static let parkedAsClaimed = """
        unnest($2::integer[], $3::integer[], $4::timestamptz[], $5::integer[]) AS c(chunk, position, due_at, attempts)
        """
    static let parkedStillAsClaimed = "abs(extract(epoch FROM r.due_at - c.due_at)) < 0.0005 AND r.attempts = c.attempts"

    /// Those of a batch's targets, as claimed, that are there to see: after `retakeParked` on the
    /// same connection, with those it took, the ones another claimer holds.
    static let parkedAsClaimedSQL = """
        SELECT r.chunk, r.position FROM pushd.campaign_retries r JOIN \(parkedAsClaimed) ON r.chunk = c.chunk AND r.position = c.position
        WHERE r.campaign_id = $1 AND \(parkedStillAsClaimed)
        """

    private static func claimedParameters(_ batch: ParkedBatch) -> [any PGParameter] {
        [batch.campaignID, batch.targets.map { Int32(clamping: $0.chunk) }, batch.targets.map { Int32(clamping: $0.position) },
         batch.targets.map(\.dueAt), batch.targets.map { Int32(clamping: $0.attempts) }]
    }

    /// Takes again, in a new transaction on `connection`, the targets of `batch` whose claim
    /// ended after they were sent (the claiming session ended, or the settle failed), so that the
    /// outcomes already known for them can be recorded with `settleParked` and they are not sent
    /// again. The claim only locked them: they are parked as they were, due. A target another
    /// claimer holds is not taken (that claimer sends it again, `parkedHeldElsewhere` names
    /// them), nor one settled since the claim (gone, or parked again): by that claimer, or by the
    /// claim's own COMMIT when it went through and only its reply was lost. Returns the batch
    /// with the targets taken; as with `claimParked`, a batch with targets leaves the connection
    /// inside the transaction, to be settled with `settleParked`.
    public func retakeParked(_ connection: PGConnection, _ batch: ParkedBatch) throws -> ParkedBatch {
        var taken = batch
        taken.targets = []
        guard !batch.targets.isEmpty else { return taken }
        try connection.execute(script: "BEGIN")
        do {
            let result = try connection.query(connection.prepared(Self.retakeParkedSQL), Self.claimedParameters(batch))
            var places = Set<ParkedPlace>()
            for row in result.rows { places.insert(ParkedPlace(chunk: try row.require(0), position: try row.require(1))) }
            taken.targets = batch.targets.filter { places.contains($0.place) }
            taken.transaction = try taken.targets.isEmpty ? nil : result.require(Int64.self, row: 0, column: 2)
            if taken.targets.isEmpty { try connection.execute(script: "COMMIT") }
            return taken
        } catch {
            if connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
    }

    /// The targets of `batch`, as claimed, that another claimer's open transaction holds: what
    /// `retakeParked` could not take and that claimer sends again. After `retakeParked`, on the
    /// same connection, less those it took.
    public func parkedHeldElsewhere(_ connection: PGConnection, _ batch: ParkedBatch, taken: ParkedBatch) throws -> Set<ParkedPlace> {
        guard !batch.targets.isEmpty else { return [] }
        let mine = Set(taken.targets.map(\.place))
        return Set(try connection.query(connection.prepared(Self.parkedAsClaimedSQL), Self.claimedParameters(batch)).rows
            .map { ParkedPlace(chunk: try $0.require(0), position: try $0.require(1)) }).subtracting(mine)
    }

    /// Records what became of a claimed parked batch (deletes its targets done with, parks its
    /// retries again), counts it, and commits; returns the campaigns this closed (done).
    ///
    /// The count writes the campaign's row, which another session may hold (an operator's
    /// open transaction, a long statement): it runs under a savepoint, and when it fails the
    /// batch is committed without it and `ParkedCountsNotWritten` thrown with the counts.
    /// Rolled back whole, the batch put every target back as it was claimed, due, and those
    /// APNs had accepted were sent again.
    @discardableResult
    public func settleParked(_ connection: PGConnection, _ batch: ParkedBatch, _ outcomes: ParkedOutcomes) throws -> [Int64] {
        var uncounted: PGError?
        do {
            let claimed = Set(batch.targets.map { ParkedKey(chunk: $0.chunk, position: $0.position) })
            let waiting = Set(outcomes.retries.map { ParkedKey(chunk: $0.chunk, position: $0.position) })
            guard outcomes.retries.allSatisfy({ $0.campaignID == batch.campaignID }), waiting.isSubset(of: claimed) else {
                throw QueueError("a parked batch of campaign \(batch.campaignID) is settled with retries of targets it did not claim")
            }
            let retries = outcomes.retries
            if !retries.isEmpty {
                try connection.query(connection.prepared(Self.keepParkedSQL), [
                    batch.campaignID, retries.map { Int32(clamping: $0.chunk) }, retries.map { Int32(clamping: $0.position) },
                    retries.map(\.dueAt), retries.map { Int32(clamping: $0.attempts) }, retries.map(\.lastError),
                ])
            }
            let done = batch.targets.filter { !waiting.contains(ParkedKey(chunk: $0.chunk, position: $0.position)) }
            if !done.isEmpty {
                try connection.query(connection.prepared(Self.dropSettledParkedSQL), [
                    batch.campaignID, done.map { Int32(clamping: $0.chunk) }, done.map { Int32(clamping: $0.position) },
                ])
            }
            if outcomes.hasCounts {
                try connection.execute(script: "SAVEPOINT pushd_count_parked")
                do {
                    try countParkedInTransaction(connection, campaignID: batch.campaignID, outcomes)
                } catch let error as PGError where !error.code.isConnectionLoss && error.code != .connectionClosed && connection.isOpen {
                    try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_count_parked")
                    uncounted = error
                }
            }
            try connection.execute(script: "COMMIT")
        } catch {
            if connection.isOpen { _ = try? connection.execute(script: "ROLLBACK") }
            throw error
        }
        // A campaign is not closed without its counts: whoever writes them closes it.
        if let uncounted { throw ParkedCountsNotWritten(campaignID: batch.campaignID, counts: outcomes.counts, error: uncounted) }
        return try closeFinishedCampaigns(connection)
    }

    /// Adds the counts a settle could not write (`ParkedCountsNotWritten`) to campaign
    /// `campaignID`, in one statement outside any transaction (to its hold while a CHECK
    /// refuses its row). Closing the campaign, if it is done, is left to the caller: once this
    /// returns, the counts are written and must not be written again.
    public func countParked(_ connection: PGConnection, campaignID: Int64, _ counts: ParkedOutcomes) throws {
        guard counts.hasCounts else { return }
        let parameters = Self.countParameters(campaignID: campaignID, counts)
        do {
            try connection.query(connection.prepared(Self.countParkedSQL), parameters)
        } catch let error as PGError where error.code == .checkViolation && !connection.isInTransaction {
            try hold(connection, campaignID: campaignID, refusedBy: error)
            try connection.query(connection.prepared(Self.countParkedSQL), parameters)
        }
    }

    /// The count of a settle, inside its transaction under the savepoint `pushd_count_parked`.
    private func countParkedInTransaction(_ connection: PGConnection, campaignID: Int64, _ outcomes: ParkedOutcomes) throws {
        let counts = Self.countParameters(campaignID: campaignID, outcomes)
        // The batch is in this transaction: a CHECK refusing the campaign's row must not roll
        // it back, or every target just sent would be sent again.
        do {
            try connection.query(connection.prepared(Self.countParkedSQL), counts)
        } catch let error as PGError where error.code == .checkViolation {
            try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_count_parked")
            try connection.query("""
                INSERT INTO pushd.campaign_refusals (campaign_id, constraint_name, message) VALUES ($1, $2, $3)
                ON CONFLICT (campaign_id) DO NOTHING
                """, [campaignID, error.constraint, error.message])
            try connection.query(connection.prepared(Self.countParkedSQL), counts)
        }
    }

    private static func countParameters(campaignID: Int64, _ outcomes: ParkedOutcomes) -> [any PGParameter] {
        let reasons = outcomes.failedByReason.keys.sorted()
        return [campaignID, outcomes.sent, outcomes.failed, outcomes.pruned, reasons, reasons.map { outcomes.failedByReason[$0]! },
                outcomes.keptTokens]
    }

    private struct ParkedKey: Hashable {
        var chunk: Int
        var position: Int
    }

    /// Targets of cancelled campaigns still parked for a retry, dropped by one sweep: how many,
    /// per campaign.
    public struct DroppedParked: Sendable, Hashable {
        public var campaignID: Int64
        public var app: String
        public var count: Int
    }

    /// Parked targets of cancelled campaigns are never claimed again (only running campaigns'
    /// are), so they would stay in the table for good and sit at the head of its due index in
    /// every claim's way. A cancelled campaign sends nothing more: they are deleted. Rows a
    /// claim holds at this moment are skipped; that claim parks what still waits and a later
    /// sweep takes it.
    static let dropCancelledParkedSQL = """
        WITH doomed AS (
            SELECT r.campaign_id, r.chunk, r.position FROM pushd.campaign_retries r
            JOIN pushd.campaigns k ON k.id = r.campaign_id AND k.status = 'cancelled' AND k.app = ANY ($1::text[])
            LIMIT $2 FOR UPDATE OF r SKIP LOCKED
        ), gone AS (
            DELETE FROM pushd.campaign_retries r USING doomed
            WHERE r.campaign_id = doomed.campaign_id AND r.chunk = doomed.chunk AND r.position = doomed.position
            RETURNING r.campaign_id
        )
        SELECT g.campaign_id, k.app, count(*)::bigint FROM gone g JOIN pushd.campaigns k ON k.id = g.campaign_id
        GROUP BY g.campaign_id, k.app ORDER BY g.campaign_id
        """

    /// Deletes up to `limit` parked targets of cancelled campaigns of `apps`; returns what it
    /// dropped per campaign (nothing, in the usual case).
    public func dropCancelledParked(_ connection: PGConnection, apps: [String], limit: Int = 10_000) throws -> [DroppedParked] {
        guard !apps.isEmpty else { return [] }
        guard limit > 0 else { throw QueueError("drop limit must be positive, got \(limit)") }
        return try connection.query(connection.prepared(Self.dropCancelledParkedSQL), [apps, limit]).rows.map { row in
            DroppedParked(campaignID: try row.require(0), app: try row.require(1), count: try row.require(2))
        }
    }

    /// Marks done every running campaign whose chunks are finished and of which nothing is
    /// parked; returns their ids. The finish of a last chunk and the settling of a last
    /// parked batch can each miss the other's uncommitted work, so workers also run this
    /// when idle.
    /// A campaign whose row a CHECK refuses is held (`CampaignRefusal`) instead of failing the
    /// statement for every campaign, every time.
    @discardableResult
    public func closeFinishedCampaigns(_ connection: PGConnection) throws -> [Int64] {
        do {
            return try connection.query(connection.prepared(Self.closeSQL), [Int64?.none]).rows.map { try $0.require(0) }
        } catch let error as PGError where error.code == .checkViolation && !connection.isInTransaction {}
        let candidates = try connection.query("""
            SELECT k.id FROM pushd.campaigns k
            WHERE k.status = 'running' AND k.chunks_done >= k.chunks_total AND k.chunks_total > 0
              AND NOT EXISTS (SELECT 1 FROM pushd.campaign_retries r WHERE r.campaign_id = k.id)
              AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals h WHERE h.campaign_id = k.id)
            ORDER BY k.id
            """).rows.map { try $0.require(0, as: Int64.self) }
        var closed = [Int64]()
        for id in candidates {
            do {
                closed += try connection.query(connection.prepared(Self.closeSQL), [id]).rows.map { try $0.require(0) }
            } catch let error as PGError where error.code == .checkViolation {
                try hold(connection, campaignID: id, refusedBy: error)
            }
        }
        return closed
    }
}
