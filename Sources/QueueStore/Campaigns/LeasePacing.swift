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
              AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals h WHERE h.campaign_id = c.id)
              AND EXISTS (SELECT 1 FROM pushd.campaign_chunks ch
                          WHERE ch.campaign_id = c.id AND ch.finished_at IS NULL
                            AND (ch.lease_until IS NULL OR ch.lease_until < now()))
            """)).get(Double.self, row: 0, column: 0)
    }
}

extension CampaignStore {
    /// Gives back the share of a rate-capped campaign's pace that a chunk's lease reserved
    /// for `unsent` targets the chunk will not send: a lease puts `next_lease_at` off by the
    /// time its chunk's targets take at the campaign's `rate_limit`, whether they are sent or
    /// not. A chunk stopped at its first target while APNs is down for its environment (a
    /// probe) reserved a whole chunk's time: by the time it came due the probe was due again,
    /// the lease handed out the next chunk of that environment, and the campaign's chunks of
    /// the other environment were not leased for as long as the outage lasted.
    ///
    /// Only this lease's own reservation is given back: `reservedUntil` is the latest it can
    /// end (the lease's database time plus its targets' time at the cap it was leased at,
    /// `rate`); a `next_lease_at` later than that was moved on since, by another lease or a
    /// deferral (`deferLeases`: a hold, a setup or start failure) that ends after it, and is
    /// left alone. A deferral that ended within the reservation changed nothing then, and
    /// is not kept now. A paused campaign's too: a chunk the pause stopped gives its time back,
    /// so that the campaign is leased at once when it is resumed. Not earlier than now: the pace keeps what the sent targets took. The
    /// campaign's row locked by another session (a checkpoint, a lease, an operator): nothing
    /// is given back rather than waited for. Returns whether the campaign's row was changed.
    @discardableResult
    public func givePaceBack(_ connection: PGConnection, campaignID: Int64, unsent: Int, rate: Int, reservedUntil: Timestamp) throws -> Bool {
        guard unsent > 0, rate > 0 else { return false }
        return try connection.query(connection.prepared("""
            UPDATE pushd.campaigns c
            SET next_lease_at = greatest(now(), c.next_lease_at - make_interval(secs => $2::float8 / $3::float8))
            WHERE c.id = (SELECT id FROM pushd.campaigns WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED)
              AND c.status IN ('running', 'paused') AND c.rate_limit IS NOT NULL AND c.next_lease_at > now()
              AND c.next_lease_at <= to_timestamp($4::float8) + interval '10 microseconds'
            """), [campaignID, Int64(unsent), Int64(rate), reservedUntil.timeIntervalSince1970]).affectedRows > 0
    }
}

extension CampaignStore {
    /// Keeps a running campaign from being leased by any instance for `seconds`: a scope it
    /// sends to is held (its topic refused to the app's credentials), so its chunks stay at
    /// their checkpoints and the campaigns after it are leased meanwhile instead of waiting
    /// behind it. One write per campaign and period, none per target.
    /// A campaign whose row a CHECK refuses is held instead (`CampaignRefusal`), which keeps it unleased too.
    public func deferLeases(_ connection: PGConnection, campaignID: Int64, seconds: Double) throws {
        do {
            try connection.query(connection.prepared("""
                UPDATE pushd.campaigns
                SET next_lease_at = greatest(coalesce(next_lease_at, now()), now() + make_interval(secs => $2))
                WHERE id = $1 AND status = 'running'
                """), [campaignID, seconds])
        } catch let error as PGError where error.code == .checkViolation && !connection.isInTransaction {
            try hold(connection, campaignID: campaignID, refusedBy: error)
        }
    }

    /// Ends `deferLeases` for `campaignIDs` (the hold ended): leasable now; a capped
    /// campaign keeps its pace from here.
    public func undeferLeases(_ connection: PGConnection, campaignIDs: [Int64]) throws {
        let undefer = """
            UPDATE pushd.campaigns
            SET next_lease_at = CASE WHEN rate_limit IS NULL THEN NULL ELSE least(next_lease_at, now()) END
            WHERE id = ANY ($1::bigint[]) AND status = 'running'
            """
        do {
            try connection.query(undefer, [campaignIDs])
        } catch let error as PGError where error.code == .checkViolation && !connection.isInTransaction {
            // One by one: a campaign whose row a CHECK refuses is held, the others undeferred.
            for id in campaignIDs {
                do {
                    try connection.query(undefer, [[id]])
                } catch let error as PGError where error.code == .checkViolation {
                    try hold(connection, campaignID: id, refusedBy: error)
                }
            }
        }
    }
}
