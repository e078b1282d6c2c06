import Posix
import Glibc

/// Campaigns: creation, audience import, the status machine, chunk leases and
/// checkpoints. Progress is written once per checkpoint of a chunk (about a
/// thousand targets), never per target.
///
/// Lease and checkpoint statements commit with `synchronous_commit = off` unless
/// `synchronousBookkeeping` is set: they are re-done by design (a lost checkpoint
/// resends from the previous one, a lost lease lets the chunk be leased again), so a
/// database crash can only add duplicates already allowed by at-least-once delivery,
/// and a worker does not wait for a WAL flush (several milliseconds on ordinary
/// disks) for every thousand targets. Imports and status changes stay synchronous.
public struct CampaignStore: Sendable {
    public static let defaultChunkSize = 1000

    public var synchronousBookkeeping: Bool

    public init(synchronousBookkeeping: Bool = false) {
        self.synchronousBookkeeping = synchronousBookkeeping
    }

    static let asyncCommit = "(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit"

    // MARK: Creation and status

    public func create(_ connection: PGConnection, _ campaign: NewCampaign) throws -> Int64 {
        try connection.query("""
            INSERT INTO pushd.campaigns (app, name, push_type, priority, environment, payload, collapse_id,
                                         expiration, start_at, rate_limit)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id
            """, [campaign.app, campaign.name, campaign.pushType, campaign.priority, campaign.environment,
                  campaign.payload, campaign.collapseID, campaign.expiration, campaign.startAt,
                  campaign.rateLimit]).require(Int64.self, row: 0, column: 0)
    }

    public func campaign(_ connection: PGConnection, id: Int64) throws -> Campaign? {
        let result = try connection.query("SELECT \(Self.campaignColumns) FROM \(Self.campaignsWithHolds) WHERE c.id = $1", [id])
        guard result.rowCount == 1 else { return nil }
        return try Self.decodeCampaign(result[0])
    }

    /// The newest campaigns first, of one app or all, in one status or any.
    public func campaigns(_ connection: PGConnection, app: String? = nil, status: CampaignStatus? = nil, limit: Int) throws -> [Campaign] {
        try connection.query("""
            SELECT \(Self.campaignColumns) FROM \(Self.campaignsWithHolds)
            WHERE ($1::text IS NULL OR c.app = $1) AND ($2::text IS NULL OR c.status = $2)
            ORDER BY c.id DESC LIMIT $3
            """, [app, status?.rawValue, limit]).rows.map(Self.decodeCampaign)
    }

    /// A campaign with what its chunks recorded while its row was refused (`CampaignRefusal`):
    /// those counts wait in `pushd.campaign_refusals` until the hold ends, and the campaign has
    /// sent them already, so every reader shows them with the row's.
    private static let campaignsWithHolds = "pushd.campaigns c LEFT JOIN pushd.campaign_refusals r ON r.campaign_id = c.id"

    private static let campaignColumns = """
        c.id, c.app, c.name, c.status, c.push_type, c.priority, c.payload, c.start_at, c.rate_limit, c.targets,
        c.sent + coalesce(r.sent, 0), c.failed + coalesce(r.failed, 0),
        ARRAY(SELECT key FROM \(failedByReason) GROUP BY key ORDER BY key),
        ARRAY(SELECT sum(value::bigint)::bigint FROM \(failedByReason) GROUP BY key ORDER BY key),
        c.pruned + coalesce(r.pruned, 0), c.chunks_total, c.chunks_done + coalesce(r.chunks_done, 0),
        c.created_at, c.started_at, c.finished_at, c.pruned_kept + coalesce(r.pruned_kept, 0)
        """
    private static let failedByReason = """
        (SELECT * FROM jsonb_each_text(c.failed_by_reason)
         UNION ALL SELECT * FROM jsonb_each_text(coalesce(r.failed_by_reason, '{}'))) counts
        """

    private static func decodeCampaign(_ row: PGRow) throws -> Campaign {
        let reasons: [String] = try row.require(12)
        let counts: [Int] = try row.require(13)
        let statusText: String = try row.require(3)
        guard let status = CampaignStatus(rawValue: statusText) else {
            throw QueueError("campaign \(try row.require(0) as Int64) has unknown status '\(statusText)'")
        }
        return Campaign(id: try row.require(0), app: try row.require(1), name: try row.require(2), status: status,
                        pushType: try row.require(4), priority: try row.require(5), payload: try row.get(6),
                        startAt: try row.get(7), rateLimit: try row.get(8), targets: try row.require(9),
                        sent: try row.require(10), failed: try row.require(11),
                        failedByReason: Dictionary(uniqueKeysWithValues: zip(reasons, counts)),
                        pruned: try row.require(14), keptTokens: try row.require(20), chunksTotal: try row.require(15),
                        chunksDone: try row.require(16), createdAt: try row.require(17), startedAt: try row.get(18),
                        finishedAt: try row.get(19))
    }

    /// draft → running, or scheduled when its start time is in the future.
    @discardableResult
    public func start(_ connection: PGConnection, id: Int64) throws -> CampaignStatus {
        try transition(connection, id: id, action: .start, sql: """
            UPDATE pushd.campaigns
            SET status = CASE WHEN start_at > now() THEN 'scheduled' ELSE 'running' END,
                started_at = CASE WHEN start_at > now() THEN NULL ELSE now() END
            WHERE id = $1 AND status = 'draft' AND targets > 0 RETURNING status
            """, extra: { campaign in
                campaign.targets == 0 ? "campaign \(id) has no targets; import targets before starting it" : nil
            })
    }

    /// The channel a pause or a cancel notifies, with the campaign's id, when it commits: the
    /// instances sending its chunks stop submitting them at once instead of at their next
    /// checkpoint (`CampaignStopWatch`). A status changed by other SQL is found by the
    /// instances' next look (`stoppedCampaigns`) or checkpoint.
    public static let stopChannel = "pushd_campaign_stop"

    /// `update` (an UPDATE … RETURNING id, status of one campaign), notifying `stopChannel`
    /// with the id of the row it changed.
    static func notifyingStop(_ update: String) -> String {
        """
        WITH changed AS (\(update))
        SELECT changed.status, pg_notify('\(stopChannel)', changed.id::text) FROM changed
        """
    }

    /// running or scheduled → paused. Workers stop at once (`stopChannel`), at their next
    /// checkpoint at the latest.
    @discardableResult
    public func pause(_ connection: PGConnection, id: Int64) throws -> CampaignStatus {
        try transition(connection, id: id, action: .pause, sql: Self.notifyingStop("""
            UPDATE pushd.campaigns SET status = 'paused'
            WHERE id = $1 AND status IN ('running', 'scheduled') RETURNING id, status
            """))
    }

    /// paused → running (or scheduled, or done if its last chunk finished while paused).
    @discardableResult
    public func resume(_ connection: PGConnection, id: Int64) throws -> CampaignStatus {
        try transition(connection, id: id, action: .resume, sql: """
            UPDATE pushd.campaigns
            SET status = CASE WHEN chunks_done >= chunks_total
                                   AND NOT EXISTS (SELECT 1 FROM pushd.campaign_retries r WHERE r.campaign_id = $1) THEN 'done'
                              WHEN start_at > now() THEN 'scheduled' ELSE 'running' END,
                started_at = CASE WHEN start_at > now() THEN started_at ELSE coalesce(started_at, now()) END,
                finished_at = CASE WHEN chunks_done >= chunks_total
                                        AND NOT EXISTS (SELECT 1 FROM pushd.campaign_retries r WHERE r.campaign_id = $1) THEN now() END
            WHERE id = $1 AND status = 'paused' RETURNING status
            """)
    }

    /// Any unfinished campaign → cancelled. Nothing more is leased; workers stop at once
    /// (`stopChannel`), at their next checkpoint at the latest.
    @discardableResult
    public func cancel(_ connection: PGConnection, id: Int64) throws -> CampaignStatus {
        try transition(connection, id: id, action: .cancel, sql: Self.notifyingStop("""
            UPDATE pushd.campaigns SET status = 'cancelled', finished_at = now(), next_lease_at = NULL
            WHERE id = $1 AND status IN ('draft', 'scheduled', 'running', 'paused') RETURNING id, status
            """))
    }

    /// Of `ids`, the campaigns that are no longer running (paused, cancelled, or gone): their
    /// chunks must not be sent on.
    public func stoppedCampaigns(_ connection: PGConnection, among ids: [Int64]) throws -> [Int64] {
        guard !ids.isEmpty else { return [] }
        return try connection.query(connection.prepared("""
            SELECT i FROM unnest($1::bigint[]) AS i
            WHERE NOT EXISTS (SELECT 1 FROM pushd.campaigns c WHERE c.id = i AND c.status = 'running')
            ORDER BY i
            """), [ids]).rows.map { try $0.require(0) }
    }

    /// A chunk no worker may be sending now: finished, released, or leased by a worker whose
    /// lease ran out. Only such chunks of a closed campaign are dropped: a worker still sending
    /// one writes its progress and the answers of its requests in flight into it (`recordSQL`
    /// matches the chunk's row), and learns at that checkpoint that the campaign was cancelled.
    /// Dropped under it, the chunk made its checkpoint match nothing: its answers were never
    /// counted and the worker took the cancel for a lost lease.
    static let chunkNotSending = "(c.finished_at IS NOT NULL OR c.lease_owner IS NULL OR c.lease_until < now())"

    /// Deletes the audience of a done or cancelled campaign, `batchChunks` chunk rows
    /// (about a thousand targets each) per transaction so that no long transaction holds
    /// back vacuum; the campaign and its counters stay. Returns the targets dropped.
    /// Chunks a worker is still sending (`chunkNotSending`) stay, with their targets: the
    /// worker stops at its next checkpoint and records what was answered, and campaign
    /// workers then drop them (`dropCancelledChunks`). `chunksStillSending` tells how many.
    @discardableResult
    public func dropTargets(_ connection: PGConnection, id: Int64, batchChunks: Int = 500) throws -> Int {
        guard batchChunks > 0 else { throw QueueError("batchChunks must be positive, got \(batchChunks)") }
        guard let campaign = try campaign(connection, id: id) else { throw QueueError("campaign \(id) does not exist") }
        guard campaign.status.isFinal else {
            throw QueueError("campaign \(id) is \(campaign.status.rawValue); only the targets of a done or cancelled campaign can be dropped")
        }
        // Sizes come from the chunk rows: reading the token arrays would detoast them all.
        let statement = try connection.prepared("""
            WITH doomed AS (
                SELECT c.chunk FROM pushd.campaign_chunks c WHERE c.campaign_id = $1 AND \(Self.chunkNotSending)
                ORDER BY c.chunk LIMIT $2 FOR UPDATE OF c SKIP LOCKED
            ), targets AS (
                DELETE FROM pushd.campaign_targets t USING doomed WHERE t.campaign_id = $1 AND t.chunk = doomed.chunk
            ), chunks AS (
                DELETE FROM pushd.campaign_chunks c USING doomed WHERE c.campaign_id = $1 AND c.chunk = doomed.chunk
                RETURNING c.size
            )
            SELECT count(*)::bigint, coalesce(sum(size), 0)::bigint FROM chunks
            """)
        var dropped = 0
        while true {
            let result = try connection.query(statement, [id, batchChunks])
            dropped += try result.require(Int.self, row: 0, column: 1)
            if try result.require(Int.self, row: 0, column: 0) == 0 { break }
        }
        try connection.query("""
            DELETE FROM pushd.campaign_targets t WHERE t.campaign_id = $1
              AND NOT EXISTS (SELECT 1 FROM pushd.campaign_chunks c WHERE c.campaign_id = t.campaign_id AND c.chunk = t.chunk)
            """, [id])
        return dropped
    }

    /// Chunks of campaign `id` that a worker may still be sending (not `chunkNotSending`).
    public func chunksStillSending(_ connection: PGConnection, id: Int64) throws -> Int {
        try connection.query("SELECT count(*)::bigint FROM pushd.campaign_chunks c WHERE c.campaign_id = $1 AND NOT \(Self.chunkNotSending)",
                             [id]).require(row: 0, column: 0)
    }

    /// The chunks of cancelled campaigns dropped by one sweep, per campaign.
    public struct DroppedChunks: Sendable, Hashable {
        public var campaignID: Int64
        public var app: String
        public var chunks: Int
        /// Targets of those chunks past their checkpoints, which are not sent.
        public var unsent: Int
    }

    /// The chunks a cancel left because workers were sending them (`dropTargets`), once those
    /// workers recorded their last answers and released or finished them, or their leases ran
    /// out. Rows a checkpoint holds at this moment are skipped; a later sweep takes them.
    static let dropCancelledChunksSQL = """
        WITH doomed AS (
            SELECT c.campaign_id, c.chunk FROM pushd.campaign_chunks c
            JOIN pushd.campaigns k ON k.id = c.campaign_id AND k.status = 'cancelled' AND k.app = ANY ($1::text[])
            WHERE \(chunkNotSending)
            LIMIT $2 FOR UPDATE OF c SKIP LOCKED
        ), targets AS (
            DELETE FROM pushd.campaign_targets t USING doomed WHERE t.campaign_id = doomed.campaign_id AND t.chunk = doomed.chunk
        ), gone AS (
            DELETE FROM pushd.campaign_chunks c USING doomed WHERE c.campaign_id = doomed.campaign_id AND c.chunk = doomed.chunk
            RETURNING c.campaign_id, CASE WHEN c.finished_at IS NULL THEN c.size - c.checkpoint ELSE 0 END AS unsent
        )
        SELECT g.campaign_id, k.app, count(*)::bigint, sum(g.unsent)::bigint FROM gone g JOIN pushd.campaigns k ON k.id = g.campaign_id
        GROUP BY g.campaign_id, k.app ORDER BY g.campaign_id
        """

    /// Deletes up to `limit` chunks (with their targets) of cancelled campaigns of `apps` that
    /// no worker is sending; returns what it dropped per campaign (nothing, in the usual case).
    public func dropCancelledChunks(_ connection: PGConnection, apps: [String], limit: Int = 500) throws -> [DroppedChunks] {
        guard !apps.isEmpty else { return [] }
        guard limit > 0 else { throw QueueError("drop limit must be positive, got \(limit)") }
        return try connection.query(connection.prepared(Self.dropCancelledChunksSQL), [apps, limit]).rows.map { row in
            DroppedChunks(campaignID: try row.require(0), app: try row.require(1), chunks: try row.require(2), unsent: try row.require(3))
        }
    }

    private func transition(_ connection: PGConnection, id: Int64, action: CampaignAction, sql: String,
                            extra: (Campaign) -> String? = { _ in nil }) throws -> CampaignStatus {
        let result = try writingRow(connection, campaignID: id, doing: "\(action.rawValue) campaign \(id)") {
            try connection.query(sql, [id])
        }
        if result.rowCount == 1, let status = CampaignStatus(rawValue: try result.require(String.self, row: 0, column: 0)) {
            return status
        }
        guard let campaign = try campaign(connection, id: id) else { throw QueueError("cannot \(action.rawValue) campaign \(id): it does not exist") }
        if let message = extra(campaign) { throw QueueError("cannot \(action.rawValue) campaign \(id): \(message)") }
        throw QueueError("cannot \(action.rawValue) campaign \(id): it is \(campaign.status.rawValue), and only a campaign that is \(action.allowedFrom.map(\.rawValue).joined(separator: " or ")) can be")
    }

    // MARK: Audience import

    /// Imports targets from a file of `token[,payload]` lines, in one transaction. A
    /// token listed twice, or already in the campaign, is dropped and counted. A line whose
    /// payload `checkPayload` refuses fails the whole import, naming the line.
    @discardableResult
    public func importTargets(_ connection: PGConnection, campaignID: Int64, fromFile path: String,
                              chunkSize: Int = defaultChunkSize,
                              checkPayload: TargetLineParser.PayloadCheck? = nil) throws -> TargetImportResult {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw QueueError("cannot open the target file \(path): \(String(cString: strerror(errno)))")
        }
        defer { Glibc.close(descriptor) }
        return try importTargets(connection, campaignID: campaignID, fromDescriptor: descriptor, sourceName: path,
                                 chunkSize: chunkSize, checkPayload: checkPayload)
    }

    /// Imports targets from an open descriptor (standard input is 0) until end of file.
    @discardableResult
    public func importTargets(_ connection: PGConnection, campaignID: Int64, fromDescriptor descriptor: Int32,
                              sourceName: String, chunkSize: Int = defaultChunkSize,
                              checkPayload: TargetLineParser.PayloadCheck? = nil) throws -> TargetImportResult {
        let parser = TargetLineParser(sourceName: sourceName, checkPayload: checkPayload)
        return try importChunks(connection, campaignID: campaignID, chunkSize: chunkSize) { emit in
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            var carry = [UInt8]()
            var lineNumber = 0
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    throw QueueError("reading \(sourceName) failed: \(String(cString: strerror(errno)))")
                }
                if count == 0 { break }
                var lineStart = 0
                for index in 0..<count where buffer[index] == 10 {
                    lineNumber += 1
                    if carry.isEmpty {
                        if let line = try parser.parse(buffer[lineStart..<index], lineNumber: lineNumber) {
                            try emit(line.token, line.payload)
                        }
                    } else {
                        carry.append(contentsOf: buffer[lineStart..<index])
                        if let line = try parser.parse(carry[...], lineNumber: lineNumber) { try emit(line.token, line.payload) }
                        carry.removeAll(keepingCapacity: true)
                    }
                    lineStart = index + 1
                }
                carry.append(contentsOf: buffer[lineStart..<count])
            }
            if !carry.isEmpty, let line = try parser.parse(carry[...], lineNumber: lineNumber + 1) {
                try emit(line.token, line.payload)
            }
        }
    }

    /// Imports targets given in memory (`payload` nil uses the campaign's payload).
    @discardableResult
    public func importTargets(_ connection: PGConnection, campaignID: Int64,
                              targets: [(token: String, payload: String?)],
                              chunkSize: Int = defaultChunkSize) throws -> TargetImportResult {
        let parser = TargetLineParser(sourceName: "target list")
        return try importChunks(connection, campaignID: campaignID, chunkSize: chunkSize) { emit in
            for (index, target) in targets.enumerated() {
                guard let line = try parser.parse(Array(target.token.utf8)[...], lineNumber: index + 1) else {
                    throw QueueError("target list entry \(index + 1): the device token is empty")
                }
                if let payload = target.payload, payload.contains("\0") {
                    throw QueueError("target list entry \(index + 1): the payload contains a NUL byte")
                }
                try emit(line.token, target.payload.map { Array($0.utf8) })
            }
        }
    }

    /// Adds every live registered token of the campaign's app that matches the filter
    /// (tokens pruned before now are left out; tokens already in the campaign are
    /// counted as duplicates and not added again).
    @discardableResult
    public func importFromDeviceTokens(_ connection: PGConnection, campaignID: Int64, environment: String? = nil,
                                       userIDs: [String]? = nil, updatedSince: Timestamp? = nil,
                                       chunkSize: Int = defaultChunkSize) throws -> TargetImportResult {
        try connection.transaction {
            try connection.execute(script: "SET LOCAL statement_timeout = 0")
            let result = try writingRow(connection, campaignID: campaignID, doing: "import targets into campaign \(campaignID)") {
                try connection.query("SELECT imported, duplicates FROM pushd.campaign_import_tokens_counted($1, $2, $3, $4, $5)",
                                     [campaignID, environment, userIDs, updatedSince, chunkSize])
            }
            return TargetImportResult(imported: try result.require(row: 0, column: 0), duplicatesDropped: try result.require(row: 0, column: 1))
        }
    }

    /// Groups the staged targets into chunk rows in their file order, keeping the first
    /// line of each token and leaving out tokens the campaign already has (from an
    /// earlier import), so that a campaign reaches each device once. Tokens pruned for the
    /// campaign's app (in its environment, when it names one) are left out and counted:
    /// APNs said they are gone, and only a new registration revives them.
    static let chunkStagedSQL = """
        WITH staged AS (
            SELECT DISTINCT ON (token) position, token, payload FROM pg_temp.pushd_import_targets ORDER BY token, position
        ), existing AS (
            SELECT e.token FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens) AS e(token) WHERE t.campaign_id = $1
        ), fresh AS (
            SELECT s.* FROM staged s WHERE NOT EXISTS (SELECT 1 FROM existing x WHERE x.token = s.token)
        ), pruned AS (
            SELECT f.token FROM fresh f JOIN pushd.campaigns k ON k.id = $1
            JOIN pushd.device_tokens d ON d.app = k.app AND d.token = f.token
            WHERE d.invalidated_at IS NOT NULL AND (k.environment IS NULL OR d.environment = k.environment)
        ), numbered AS (
            SELECT f.position, f.token, f.payload, (row_number() OVER (ORDER BY f.position) - 1) / $3 AS n
            FROM fresh f WHERE NOT EXISTS (SELECT 1 FROM pruned x WHERE x.token = f.token)
        ), targets AS (
            INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, payloads)
            SELECT $1, $2 + n::integer, array_agg(token ORDER BY position),
                   CASE WHEN bool_or(payload IS NOT NULL) THEN array_agg(payload ORDER BY position) END
            FROM numbered GROUP BY n
            RETURNING chunk, cardinality(tokens) AS size
        ), chunks AS (
            INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size) SELECT $1, chunk, size FROM targets RETURNING size
        )
        SELECT coalesce(sum(size), 0)::bigint, count(*)::bigint, (SELECT count(*) FROM pruned)::bigint FROM chunks
        """

    private func importChunks(_ connection: PGConnection, campaignID: Int64, chunkSize: Int,
                              _ produce: (_ emit: (_ token: [UInt8], _ payload: [UInt8]?) throws -> Void) throws -> Void) throws -> TargetImportResult {
        guard (1...100_000).contains(chunkSize) else {
            throw QueueError("chunk size must be between 1 and 100000, got \(chunkSize)")
        }
        // The campaign's row is not locked while the audience is read and grouped: the workers
        // write it at every checkpoint and finish, and the lease writes a capped campaign's pace
        // into it. What a lock held from the start kept is kept so (migration 31):
        // - imports of one campaign take turns (`campaign_import_lock`, which nothing else
        //   takes), so chunk numbers follow on and a token of one import is a duplicate in the next;
        // - the new chunks are counted into `targets` and `chunks_total` by one UPDATE at the end,
        //   only while the campaign is open, in the transaction that adds them: a worker's finish
        //   either comes first (and the campaign, closed meanwhile, refuses the import whole) or
        //   waits that last statement out and counts the new chunks.
        return try connection.transaction {
            // A large audience takes longer than pushd's per-statement limit to copy.
            try connection.execute(script: "SET LOCAL statement_timeout = 0")
            let head = try connection.query("SELECT status FROM pushd.campaigns WHERE id = $1", [campaignID])
            guard head.rowCount == 1 else { throw QueueError("cannot import targets: campaign \(campaignID) does not exist") }
            let status: String = try head.require(row: 0, column: 0)
            if status == CampaignStatus.done.rawValue || status == CampaignStatus.cancelled.rawValue {
                throw QueueError("cannot import targets: campaign \(campaignID) is \(status)")
            }
            // Targets go through a temporary table so that duplicates are found by the
            // database, whatever the audience's size, rather than in this process's memory.
            try connection.execute(script: """
                CREATE TEMP TABLE pushd_import_targets (position bigint NOT NULL, token text NOT NULL, payload text)
                ON COMMIT DROP
                """)
            var encoder = StagedTargetEncoder()
            try connection.copyIn("COPY pg_temp.pushd_import_targets (position, token, payload) FROM STDIN") { writer in
                var line = [UInt8]()
                try produce { token, payload in
                    line.removeAll(keepingCapacity: true)
                    encoder.line(token: token, payload: payload, into: &line)
                    try writer.writeRaw(line)
                }
            }
            try connection.query("SELECT pushd.campaign_import_lock($1)", [campaignID])
            let firstChunk = try connection.query("SELECT coalesce(max(chunk) + 1, 0) FROM pushd.campaign_chunks WHERE campaign_id = $1",
                                                  [campaignID]).require(Int.self, row: 0, column: 0)
            let chunked = try connection.query(Self.chunkStagedSQL, [campaignID, firstChunk, chunkSize])
            let added: Int = try chunked.require(row: 0, column: 0)
            let chunks: Int = try chunked.require(row: 0, column: 1)
            let pruned: Int = try chunked.require(row: 0, column: 2)
            if chunks > 0 {
                // Fresh statistics keep the lease on the chunk index; planned on a stale
                // row count it can sort every chunk of the campaign for each lease. Taken
                // before the row is locked: it counts this transaction's rows already.
                try connection.execute(script: "ANALYZE pushd.campaign_chunks")
                let counted = try writingRow(connection, campaignID: campaignID, doing: "import targets into campaign \(campaignID)") {
                    try connection.query("""
                        UPDATE pushd.campaigns SET targets = targets + $2, chunks_total = chunks_total + $3
                        WHERE id = $1 AND status NOT IN ('done', 'cancelled')
                        """, [campaignID, added, chunks])
                }
                if counted.affectedRows == 0 {
                    let current = try connection.query("SELECT status FROM pushd.campaigns WHERE id = $1", [campaignID])
                    let closed = current.rowCount == 1 ? try current.require(String.self, row: 0, column: 0) : "deleted"
                    throw QueueError("cannot import targets: campaign \(campaignID) became \(closed) while its targets were being read; none of them was added")
                }
            }
            return TargetImportResult(imported: added, duplicatesDropped: encoder.count - added - pruned, prunedDropped: pruned)
        }
    }

    // MARK: Chunk leases

    static func leaseSQL(synchronous: Bool) -> String {
        """
        WITH l AS MATERIALIZED (SELECT * FROM pushd.lease_campaign_chunk($1, $2, $3, $4::bigint[], $5::bigint[], $6::bigint[]))
        SELECT l.leased_campaign, l.leased_chunk, l.leased_size, l.leased_checkpoint, l.leased_until,
               k.app, k.push_type, k.priority, k.environment, k.collapse_id, k.expiration, k.payload, k.rate_limit,
               t.tokens[l.leased_checkpoint + 1 :], t.payloads[l.leased_checkpoint + 1 :], t.environments[l.leased_checkpoint + 1 :],
               l.expired_owner, l.expired_at, l.leased_environment
        FROM l
        JOIN pushd.campaigns k ON k.id = l.leased_campaign
        JOIN pushd.campaign_targets t ON t.campaign_id = l.leased_campaign AND t.chunk = l.leased_chunk
        \(synchronous ? "" : "CROSS JOIN " + asyncCommit)
        """
    }

    /// Leases the next chunk of a running campaign of one of `apps` for `leaseSeconds`, or
    /// returns nil when nothing is ready. Campaigns of other apps are left to an instance
    /// configured for them. `owner` must be unique per worker. A chunk whose lease expired
    /// (its worker vanished) is handed out again from its last checkpoint. The campaigns in
    /// `skipping` are passed over: capped campaigns whose chunk this process is still pacing
    /// (migration 33), so that one capped campaign never takes more than a chunk at a time of it,
    /// and campaigns waiting for APNs. Of the campaigns in `skippingChunksTo`, by environment,
    /// the chunks whose targets all go to that environment (`CampaignChunk.targetsEnvironment`)
    /// are passed over and their other chunks leased (migration 35).
    public func leaseChunk(_ connection: PGConnection, owner: String, apps: [String], leaseSeconds: Double,
                           skipping: [Int64] = [], skippingChunksTo: [String: [Int64]] = [:]) throws -> CampaignChunk? {
        guard leaseSeconds > 0 else { throw QueueError("lease duration must be positive, got \(leaseSeconds)") }
        guard !apps.isEmpty else { return nil }
        if let unknown = skippingChunksTo.keys.first(where: { !CampaignChunk.taggedEnvironments.contains($0) }) {
            throw QueueError("cannot pass over the chunks of environment \"\(unknown)\": chunks record only \(CampaignChunk.taggedEnvironments.joined(separator: " and "))")
        }
        let result = try connection.query(connection.prepared(Self.leaseSQL(synchronous: synchronousBookkeeping)),
                                          [owner, leaseSeconds, apps, skipping,
                                           skippingChunksTo["production"] ?? [], skippingChunksTo["sandbox"] ?? []])
        guard result.rowCount == 1 else { return nil }
        let row = result[0]
        let start: Int = try row.require(3)
        let tokens = try result.withBytes(row: 0, column: 13) { bytes -> DeviceTokenBlock in
            guard let bytes else { return DeviceTokenBlock() }
            guard let tokens = DeviceTokenBlock(arrayLiteral: bytes) else {
                throw QueueError("the device tokens of chunk \(try row.require(1, as: Int.self)) of campaign \(try row.require(0, as: Int64.self)) are not a readable array")
            }
            return tokens
        }
        let payloads: [String?] = try result.withBytes(row: 0, column: 14) { bytes in
            guard let bytes else { return [] }
            guard let items = PGArrayLiteral.parse(bytes) else {
                throw QueueError("the per-target payloads of a campaign chunk are not a readable array")
            }
            return items
        }
        let environments: [String?] = try result.withBytes(row: 0, column: 15) { bytes in
            guard let bytes else { return [] }
            guard let items = PGArrayLiteral.parse(bytes) else {
                throw QueueError("the per-target environments of a campaign chunk are not a readable array")
            }
            return items
        }
        // A chunk's payloads and environments are NULL when no target has its own, else one per target.
        let targets = CampaignTargets(firstIndex: start, tokens: tokens,
                                      payloads: payloads.contains { $0 != nil } ? payloads : [],
                                      environments: environments.contains { $0 != nil } ? environments : [])
        return CampaignChunk(campaignID: try row.require(0), chunk: try row.require(1), owner: owner,
                             leaseUntil: try row.require(4), size: try row.require(2), startIndex: start,
                             app: try row.require(5), pushType: try row.require(6), priority: try row.require(7),
                             environment: try row.get(8), collapseID: try row.get(9), expiration: try row.get(10),
                             payload: try row.get(11), rateLimit: try row.get(12), targets: targets,
                             expiredOwner: try row.get(16), expiredAt: try row.get(17), targetsEnvironment: try row.get(18))
    }

    /// A campaign's chunk, by campaign and number.
    public struct ChunkKey: Sendable, Hashable {
        public var campaignID: Int64
        public var chunk: Int

        public init(campaignID: Int64, chunk: Int) {
            self.campaignID = campaignID
            self.chunk = chunk
        }
    }

    /// A chunk `releaseUnheldLeases` gave back.
    public struct GivenBack: Sendable {
        public var chunk: ChunkKey
        /// The lease the given-back one had replaced, put back: it ran out unsettled (its worker
        /// died or lost the database mid-chunk), so the next lease takes the chunk over from it.
        /// nil when the chunk was free.
        public var replacedOwner: String?
        public var replacedUntil: Timestamp?
    }

    /// Gives back the chunks leased under `owner` other than `holding`: leases its worker never
    /// read the answer of (the session ended as the lease committed), which went through or
    /// not. Left alone, such a chunk sat leased to nobody for the lease's length and was then
    /// taken over from the live worker that had taken it. Nothing of them was sent by `owner`,
    /// so they resume at their checkpoints; the lease each replaced is put back (migration 36),
    /// so that a chunk whose earlier worker died mid-chunk is still taken over from that one.
    public func releaseUnheldLeases(_ connection: PGConnection, owner: String, holding: [ChunkKey]) throws -> [GivenBack] {
        let result = try connection.query("""
            UPDATE pushd.campaign_chunks
            SET lease_owner = replaced_owner, lease_until = CASE WHEN replaced_owner IS NULL THEN NULL ELSE replaced_until END,
                replaced_owner = NULL, replaced_until = NULL
            WHERE lease_owner = $1 AND finished_at IS NULL
              AND (campaign_id, chunk) NOT IN (SELECT c, n FROM unnest($2::bigint[], $3::int[]) AS h(c, n))
            RETURNING campaign_id, chunk, lease_owner, lease_until
            """, [owner, holding.map(\.campaignID), holding.map { Int64($0.chunk) }])
        return try (0..<result.rowCount).map {
            GivenBack(chunk: ChunkKey(campaignID: try result.require(row: $0, column: 0), chunk: try result.require(row: $0, column: 1)),
                      replacedOwner: try result.get(row: $0, column: 2), replacedUntil: try result.get(row: $0, column: 3))
        }
    }

    /// Of `chunks`, those still leased under `owner` (their leases not taken by another since).
    public func stillLeased(_ connection: PGConnection, owner: String, among chunks: [ChunkKey]) throws -> Set<ChunkKey> {
        guard !chunks.isEmpty else { return [] }
        let result = try connection.query("""
            SELECT campaign_id, chunk FROM pushd.campaign_chunks
            WHERE lease_owner = $1 AND finished_at IS NULL
              AND (campaign_id, chunk) IN (SELECT c, n FROM unnest($2::bigint[], $3::int[]) AS h(c, n))
            """, [owner, chunks.map(\.campaignID), chunks.map { Int64($0.chunk) }])
        return Set(try (0..<result.rowCount).map {
            ChunkKey(campaignID: try result.require(row: $0, column: 0), chunk: try result.require(row: $0, column: 1))
        })
    }

    static func recordSQL(synchronous: Bool) -> String {
        """
        WITH campaign AS (
            -- The campaign's row before the chunk's: a write that waits for it (another session
            -- holds it) waits without locking the chunk's row, so the lease keeper goes on
            -- extending the chunk's lease, and the lease is counted from when the wait ended.
            SELECT id FROM pushd.campaigns WHERE id = $1 FOR NO KEY UPDATE
        ), ch AS (
            UPDATE pushd.campaign_chunks
            SET checkpoint = $3,
                lease_owner = CASE WHEN $5 = 'release' THEN NULL ELSE lease_owner END,
                lease_until = CASE WHEN $5 = 'release' THEN NULL ELSE clock_timestamp() + make_interval(secs => $6) END,
                finished_at = CASE WHEN $5 = 'finish' THEN now() END
            FROM campaign
            WHERE campaign_id = campaign.id AND chunk = $2 AND lease_owner = $4 AND finished_at IS NULL
            RETURNING campaign_id
        ), held AS (
            -- A campaign whose row a CHECK refuses (CampaignRefusal) counts with its hold.
            UPDATE pushd.campaign_refusals h
            SET sent = h.sent + $7, failed = h.failed + $8, pruned = h.pruned + $9, pruned_kept = h.pruned_kept + $12,
                failed_by_reason = CASE WHEN cardinality($10::text[]) = 0 THEN h.failed_by_reason
                    ELSE pushd.add_counts(h.failed_by_reason,
                        (SELECT jsonb_object_agg(r, n) FROM unnest($10::text[], $11::bigint[]) AS u(r, n))) END,
                chunks_done = h.chunks_done + CASE WHEN $5 = 'finish' THEN 1 ELSE 0 END
            FROM ch WHERE h.campaign_id = ch.campaign_id
            RETURNING h.campaign_id
        ), k AS (
            UPDATE pushd.campaigns k
            SET sent = k.sent + $7, failed = k.failed + $8, pruned = k.pruned + $9, pruned_kept = k.pruned_kept + $12,
                failed_by_reason = CASE WHEN cardinality($10::text[]) = 0 THEN k.failed_by_reason
                    ELSE pushd.add_counts(k.failed_by_reason,
                        (SELECT jsonb_object_agg(r, n) FROM unnest($10::text[], $11::bigint[]) AS u(r, n))) END,
                chunks_done = k.chunks_done + CASE WHEN $5 = 'finish' THEN 1 ELSE 0 END,
                status = CASE WHEN $5 = 'finish' AND k.chunks_done + 1 >= k.chunks_total AND k.status = 'running'
                                   AND NOT EXISTS (SELECT 1 FROM pushd.campaign_retries r WHERE r.campaign_id = k.id)
                              THEN 'done' ELSE k.status END,
                finished_at = CASE WHEN $5 = 'finish' AND k.chunks_done + 1 >= k.chunks_total AND k.status = 'running'
                                        AND NOT EXISTS (SELECT 1 FROM pushd.campaign_retries r WHERE r.campaign_id = k.id)
                                   THEN now() ELSE k.finished_at END
            FROM ch WHERE k.id = ch.campaign_id AND NOT EXISTS (SELECT 1 FROM held)
            RETURNING k.status
        )
        SELECT o.status, o.held FROM (SELECT status, false AS held FROM k UNION ALL SELECT NULL::text, true FROM held) o\(synchronous ? "" : " CROSS JOIN " + asyncCommit)
        """
    }

    /// Records progress and extends the lease by `leaseSeconds`.
    public func checkpoint(_ connection: PGConnection, _ chunk: CampaignChunk, _ progress: ChunkProgress,
                           leaseSeconds: Double) throws -> ChunkDirective {
        try record(connection, chunk, progress, mode: "checkpoint", leaseSeconds: leaseSeconds)
    }

    /// Records the last outcomes and marks the chunk finished; the campaign becomes done
    /// with its last chunk.
    @discardableResult
    public func finish(_ connection: PGConnection, _ chunk: CampaignChunk, _ progress: ChunkProgress) throws -> ChunkDirective {
        var complete = progress
        complete.position = chunk.size
        return try record(connection, chunk, complete, mode: "finish", leaseSeconds: 0)
    }

    /// Records progress and gives the chunk up so that it can be leased again at once
    /// (after a pause, or on shutdown).
    @discardableResult
    public func release(_ connection: PGConnection, _ chunk: CampaignChunk, _ progress: ChunkProgress) throws -> ChunkDirective {
        try record(connection, chunk, progress, mode: "release", leaseSeconds: 0)
    }

    private func record(_ connection: PGConnection, _ chunk: CampaignChunk, _ progress: ChunkProgress,
                        mode: String, leaseSeconds: Double) throws -> ChunkDirective {
        guard (0...chunk.size).contains(progress.position) else {
            throw QueueError("checkpoint position \(progress.position) is outside chunk \(chunk.chunk) of campaign \(chunk.campaignID) (size \(chunk.size))")
        }
        let reasons = progress.failedByReason.keys.sorted()
        let write = {
            try connection.query(connection.prepared(Self.recordSQL(synchronous: synchronousBookkeeping)), [
                chunk.campaignID, chunk.chunk, progress.position, chunk.owner, mode, leaseSeconds,
                progress.sent, progress.failed, progress.pruned, reasons, reasons.map { progress.failedByReason[$0]! },
                progress.keptTokens,
            ])
        }
        // In the caller's transaction (a chunk's prunes with its checkpoint, parked targets with
        // its release), a refused write is undone alone and the transaction goes on.
        let guarded = connection.isInTransaction
        let result: PGResult
        do {
            if guarded { try connection.execute(script: "SAVEPOINT pushd_record") }
            let written = try write()
            if guarded { try connection.execute(script: "RELEASE SAVEPOINT pushd_record") }
            result = written
        } catch let error as PGError where error.code == .checkViolation && (guarded ? connection.isOpen : !connection.isInTransaction) {
            if guarded { try connection.execute(script: "ROLLBACK TO SAVEPOINT pushd_record; RELEASE SAVEPOINT pushd_record") }
            // The campaign's row is refused (a NOT VALID check it breaks): held, the chunk's
            // progress is written without it, its counts kept with the hold.
            try hold(connection, campaignID: chunk.campaignID, refusedBy: error)
            result = try write()
        }
        guard result.rowCount == 1 else { return .leaseLost }
        if try result.require(Bool.self, row: 0, column: 1) {
            guard let held = try refusal(connection, campaignID: chunk.campaignID) else { return .leaseLost }
            return .refused(held)
        }
        let text: String = try result.require(row: 0, column: 0)
        guard let status = CampaignStatus(rawValue: text) else { throw QueueError("campaign \(chunk.campaignID) has unknown status '\(text)'") }
        return status == .running ? .proceed : .stop(status)
    }
}

/// Lease keeping apart from checkpoints: an instance's lease keeper extends, on a connection of
/// its own, the leases of the chunks its live workers hold (docs/operations.md, "Lease keeping").
extension CampaignStore {
    /// One chunk a worker holds: the lease is extended only while `owner` still holds it.
    public struct HeldChunk: Sendable, Hashable {
        public var campaignID: Int64
        public var chunk: Int
        public var owner: String

        public init(campaignID: Int64, chunk: Int, owner: String) {
            self.campaignID = campaignID
            self.chunk = chunk
            self.owner = owner
        }
    }

    /// Rows locked by another session (a checkpoint of the same chunk, a lease in progress)
    /// are skipped, never waited for: the keeper must not stall behind anyone's transaction.
    static let renewSQL = """
        WITH held AS (
            SELECT c.campaign_id, c.chunk FROM pushd.campaign_chunks c
            JOIN unnest($1::bigint[], $2::integer[], $3::text[]) AS u(campaign_id, chunk, owner)
              ON c.campaign_id = u.campaign_id AND c.chunk = u.chunk AND c.lease_owner = u.owner
            WHERE c.finished_at IS NULL
            FOR UPDATE OF c SKIP LOCKED
        )
        UPDATE pushd.campaign_chunks c
        SET lease_until = greatest(c.lease_until, now() + make_interval(secs => $4))
        FROM held WHERE c.campaign_id = held.campaign_id AND c.chunk = held.chunk
        RETURNING c.campaign_id, c.chunk
        """

    /// Extends by `leaseSeconds` the leases of `chunks` still held by their owners; returns
    /// how many were extended (a skipped, locked row is being checkpointed by its owner).
    @discardableResult
    public func renewLeases(_ connection: PGConnection, _ chunks: [HeldChunk], leaseSeconds: Double) throws -> Int {
        guard !chunks.isEmpty else { return 0 }
        guard leaseSeconds > 0 else { throw QueueError("lease duration must be positive, got \(leaseSeconds)") }
        let result = try connection.query(connection.prepared(Self.renewSQL), [
            chunks.map(\.campaignID), chunks.map { Int32(clamping: $0.chunk) }, chunks.map(\.owner), leaseSeconds,
        ])
        return result.rowCount
    }
}
