import Posix

/// A running campaign that has a chunk to lease now and no chunk being sent anywhere in the
/// fleet: no worker took it (every one is busy with other campaigns' chunks), or none could.
public struct WaitingCampaign: Sendable, Hashable {
    public var id: Int64
    public var app: String

    public init(id: Int64, app: String) {
        self.id = id
        self.app = app
    }
}

extension CampaignStore {
    /// The running campaigns of `apps` that the lease would hand out now (due, not held, a
    /// chunk neither finished nor leased) while none of their chunks is leased by any worker.
    /// One read every few seconds by one worker per instance (`CampaignWaitWatch`).
    /// The campaigns waiting for APNs are told as the lease is told them: those in
    /// `passingOver` wait on purpose and are left out; of those in `passingOverChunksTo`, by
    /// environment, only the chunks of another environment (or that record none) count, so a
    /// campaign waiting for a sandbox outage whose production chunks no worker takes is found.
    public func campaignsWaitingForWorker(_ connection: PGConnection, apps: [String], passingOver: [Int64] = [],
                                          passingOverChunksTo: [String: [Int64]] = [:]) throws -> [WaitingCampaign] {
        guard !apps.isEmpty else { return [] }
        if let unknown = passingOverChunksTo.keys.first(where: { !CampaignChunk.taggedEnvironments.contains($0) }) {
            throw QueueError("cannot pass over the chunks of environment \"\(unknown)\": chunks record only \(CampaignChunk.taggedEnvironments.joined(separator: " and "))")
        }
        let result = try connection.query(connection.prepared("""
            SELECT c.id, c.app FROM pushd.campaigns c
            WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
              AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
              AND c.app = ANY ($1::text[])
              AND NOT (c.id = ANY ($2::bigint[]))
              AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals r WHERE r.campaign_id = c.id)
              AND EXISTS (SELECT 1 FROM pushd.campaign_chunks ch
                          WHERE ch.campaign_id = c.id AND ch.finished_at IS NULL
                            AND (ch.lease_until IS NULL OR ch.lease_until < now())
                            AND NOT coalesce((ch.environment = 'production' AND c.id = ANY ($3::bigint[]))
                                             OR (ch.environment = 'sandbox' AND c.id = ANY ($4::bigint[])), false))
              AND NOT EXISTS (SELECT 1 FROM pushd.campaign_chunks ch
                              WHERE ch.campaign_id = c.id AND ch.finished_at IS NULL AND ch.lease_until >= now())
            ORDER BY c.id
            """), [apps, passingOver, passingOverChunksTo["production"] ?? [], passingOverChunksTo["sandbox"] ?? []])
        return try (0..<result.rowCount).map { row in
            WaitingCampaign(id: try result.require(row: row, column: 0), app: try result.require(row: row, column: 1))
        }
    }

    /// Which of `ids` are running: a campaign cancelled, paused, finished or deleted while it
    /// waited for APNs (`pushd_campaigns_waiting_for_apns`) waits for nothing any more.
    public func runningCampaigns(_ connection: PGConnection, ids: [Int64]) throws -> Set<Int64> {
        guard !ids.isEmpty else { return [] }
        let result = try connection.query(connection.prepared("""
            SELECT id FROM pushd.campaigns WHERE id = ANY ($1::bigint[]) AND status = 'running'
            """), [ids])
        return Set(try (0..<result.rowCount).map { row in try result.require(Int64.self, row: row, column: 0) })
    }
}
