extension Migrator {
    /// A rate-capped campaign took every campaign worker of every instance and newer campaigns
    /// got nothing for as long as it lasted: a worker pacing a capped chunk leased nothing else
    /// until the chunk was sent, and the lease, oldest campaign first, handed each worker that
    /// came free another chunk of the capped one whenever its pace did not hold it back (a cap
    /// from the configuration, `campaigns.default_rate` or an app's `campaign_rate`, which the
    /// lease schedule does not know). Each worker then sent a fraction of the one cap.
    ///
    /// Workers now keep leasing while they wait between paced sends, and a process takes one
    /// chunk of a capped campaign at a time: the lease is told which campaigns to pass over
    /// (`p_skip`, the capped campaigns whose chunk the process still has targets of to send),
    /// and leases the next campaign instead. The three-argument lease is kept unchanged for
    /// instances of the previous version that share the database during an upgrade.
    static let cappedFairnessV33 = #"""
    CREATE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[], p_skip bigint[])
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz,
                   expired_owner text, expired_at timestamptz)
    LANGUAGE plpgsql ROWS 1 AS $$
    DECLARE
        k record;
        picked record;
        refused_check text;
        refused_message text;
        previous_lock_timeout text;
    BEGIN
        FOR k IN SELECT c.id, c.rate_limit, c.status, c.started_at FROM pushd.campaigns c
                 WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
                   AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                   AND c.app = ANY (p_apps)
                   AND NOT (c.id = ANY (coalesce(p_skip, '{}')))
                   AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals r WHERE r.campaign_id = c.id)
                 ORDER BY c.id
        LOOP
            SELECT ch.chunk, ch.size, ch.checkpoint, ch.lease_owner, ch.lease_until INTO picked FROM pushd.campaign_chunks ch
            WHERE ch.campaign_id = k.id AND ch.finished_at IS NULL
              AND (ch.lease_until IS NULL OR ch.lease_until < now())
            ORDER BY ch.chunk LIMIT 1 FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF k.rate_limit IS NOT NULL OR k.status = 'scheduled' OR k.started_at IS NULL THEN
                -- A row another session holds for a moment (a checkpoint's counters) is waited
                -- for, a quarter of a second at most; one held longer (an operator's open
                -- transaction) is not: this campaign is leased next time, the others now.
                previous_lock_timeout := current_setting('lock_timeout');
                BEGIN
                    PERFORM set_config('lock_timeout', '250ms', true);
                    PERFORM 1 FROM pushd.campaigns c WHERE c.id = k.id FOR NO KEY UPDATE;
                    PERFORM set_config('lock_timeout', previous_lock_timeout, true);
                EXCEPTION WHEN lock_not_available THEN
                    CONTINUE;
                END;
                BEGIN
                    UPDATE pushd.campaigns c
                    SET status = 'running', started_at = coalesce(c.started_at, now()),
                        next_lease_at = CASE WHEN c.rate_limit IS NULL THEN NULL
                            ELSE greatest(coalesce(c.next_lease_at, now()), now() - interval '200 milliseconds')
                                 + make_interval(secs => (picked.size - picked.checkpoint)::float8 / c.rate_limit) END
                    WHERE c.id = k.id AND c.status IN ('running', 'scheduled')
                      AND (c.next_lease_at IS NULL OR c.next_lease_at <= now());
                    CONTINUE WHEN NOT FOUND;
                EXCEPTION WHEN check_violation THEN
                    -- One campaign's row must not fail the lease of every campaign, every time.
                    GET STACKED DIAGNOSTICS refused_check = CONSTRAINT_NAME, refused_message = MESSAGE_TEXT;
                    INSERT INTO pushd.campaign_refusals (campaign_id, constraint_name, message)
                    VALUES (k.id, nullif(refused_check, ''), refused_message) ON CONFLICT (campaign_id) DO NOTHING;
                    CONTINUE;
                END;
            END IF;
            UPDATE pushd.campaign_chunks ch
            SET lease_owner = p_owner, lease_until = now() + make_interval(secs => p_seconds), leases = ch.leases + 1
            WHERE ch.campaign_id = k.id AND ch.chunk = picked.chunk;
            leased_campaign := k.id;
            leased_chunk := picked.chunk;
            leased_size := picked.size;
            leased_checkpoint := picked.checkpoint;
            leased_until := now() + make_interval(secs => p_seconds);
            -- A release clears the owner; an owner still set means its lease ran out.
            expired_owner := CASE WHEN picked.lease_until IS NOT NULL THEN picked.lease_owner END;
            expired_at := picked.lease_until;
            RETURN NEXT;
            RETURN;
        END LOOP;
    END $$;

    SELECT pushd.grant_roles();
    """#
}
