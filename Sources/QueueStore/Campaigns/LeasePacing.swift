import Posix

extension CampaignStore {
    /// Seconds until the next chunk of a rate-capped running campaign may be leased (zero or
    /// less: it may be now), or nil when no capped campaign has a chunk to lease. An idle
    /// worker sleeps this long instead of a whole polling interval, so a capped campaign's
    /// leases are taken on time.
    public func secondsUntilNextLease(_ connection: PGConnection) throws -> Double? {
        try connection.query(connection.prepared("""
            SELECT extract(epoch FROM min(c.next_lease_at) - clock_timestamp())::float8
            FROM pushd.campaigns c
            WHERE c.status = 'running' AND c.next_lease_at IS NOT NULL
              AND EXISTS (SELECT 1 FROM pushd.campaign_chunks ch
                          WHERE ch.campaign_id = c.id AND ch.finished_at IS NULL
                            AND (ch.lease_until IS NULL OR ch.lease_until < now()))
            """)).get(Double.self, row: 0, column: 0)
    }
}
