import Posix

/// The dedupe keys of `pushd.jobs`, kept in `pushd.job_dedupe_keys` (migration 28): an
/// application's INSERT takes its key there, and a taken key makes the INSERT skip the row,
/// for as long as the key is kept, whether its job is queued, being sent, delivered, retried or
/// dead. `sweep` frees keys once they are older than the retention and their job has left the
/// queue; a job still queued or in an open claim batch (its delete not committed) keeps its key,
/// so pushd putting it back for a retry always finds the key its own.
public struct DedupeLedger: Sendable {
    /// Keys one sweep statement deletes at most: a bounded transaction and a bounded pause of
    /// autovacuum's work, however many keys came due at once.
    public static let sweepBatch = 5_000
    /// Statements one `sweepDue` runs at most; the rest waits for the next round.
    public static let sweepRounds = 20

    public init() {}

    /// Deletes up to `limit` keys taken more than `retentionSeconds` ago whose job is no longer
    /// in `pushd.jobs`, oldest first, and returns how many. Keys another sweeper is deleting are
    /// skipped, so several instances sweeping at once do not wait on each other.
    @discardableResult
    public func sweep(_ connection: PGConnection, retentionSeconds: Int, limit: Int = sweepBatch) throws -> Int {
        try connection.query(connection.prepared("""
            WITH due AS (
                SELECT k.app, k.dedupe_key, k.device_token FROM pushd.job_dedupe_keys k
                WHERE k.created_at < now() - make_interval(secs => $1::float8)
                  AND NOT EXISTS (SELECT 1 FROM pushd.jobs j WHERE j.id = k.job_id)
                ORDER BY k.created_at LIMIT $2 FOR UPDATE OF k SKIP LOCKED
            ), gone AS (
                DELETE FROM pushd.job_dedupe_keys k USING due
                WHERE k.app = due.app AND k.dedupe_key = due.dedupe_key AND k.device_token = due.device_token
                RETURNING 1
            )
            SELECT count(*) FROM gone
            """), [Double(retentionSeconds), limit]).require(Int.self, row: 0, column: 0)
    }

    /// Sweeps in batches of `sweepBatch` until a batch comes back short or `sweepRounds` ran;
    /// returns how many keys went and whether some may be left (every batch was full).
    public func sweepDue(_ connection: PGConnection, retentionSeconds: Int) throws -> (deleted: Int, more: Bool) {
        var deleted = 0
        for _ in 0..<Self.sweepRounds {
            let batch = try sweep(connection, retentionSeconds: retentionSeconds)
            deleted += batch
            if batch < Self.sweepBatch { return (deleted, false) }
        }
        return (deleted, true)
    }
}
