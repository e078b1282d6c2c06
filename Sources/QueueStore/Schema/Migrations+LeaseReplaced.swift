extension Migrator {
    /// A worker that did not read the answer of its lease (the session ended as it committed)
    /// did not know it held the chunk: the chunk sat leased to nobody for `lease_s`, and was
    /// then taken over from that live worker with a warning that it had died. The worker now
    /// gives back, on its next session, the chunks leased under its name that it does not hold
    /// (`CampaignStore.releaseUnheldLeases`). A lease may have replaced one that ran out
    /// unsettled (its worker died mid-chunk, having sent targets after its checkpoint): giving
    /// the chunk back must not hide that from the next leaser, whose `chunk_taken_over`
    /// warning says those targets go again. So the lease keeps the lease it replaced
    /// (`replaced_owner`, `replaced_until`: NULL when the chunk was free) and the give-back puts
    /// it back. The function keeps its arguments and its result: instances of the previous
    /// version sharing the database during an upgrade lease as before.
    static let leaseReplacedV36 = #"""
    ALTER TABLE pushd.campaign_chunks ADD COLUMN replaced_owner text, ADD COLUMN replaced_until timestamptz;

    CREATE OR REPLACE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[], p_skip bigint[],
                                               p_skip_production bigint[], p_skip_sandbox bigint[])
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz,
                   expired_owner text, expired_at timestamptz, leased_environment text)
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
            SELECT ch.chunk, ch.size, ch.checkpoint, ch.lease_owner, ch.lease_until, ch.environment INTO picked FROM pushd.campaign_chunks ch
            WHERE ch.campaign_id = k.id AND ch.finished_at IS NULL
              AND (ch.lease_until IS NULL OR ch.lease_until < now())
              -- A chunk whose targets all go to an environment APNs is down for waits; the
              -- campaign's other chunks are leased. An untagged chunk is never passed over here.
              AND NOT coalesce((ch.environment = 'production' AND k.id = ANY (p_skip_production))
                               OR (ch.environment = 'sandbox' AND k.id = ANY (p_skip_sandbox)), false)
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
            -- The lease it replaces, when it ran out unsettled, is kept beside it: a worker that
            -- did not read this lease's answer gives the chunk back with it
            -- (`CampaignStore.releaseUnheldLeases`), so that whoever leases it next still says
            -- the chunk was taken over from that one.
            UPDATE pushd.campaign_chunks ch
            SET lease_owner = p_owner, lease_until = now() + make_interval(secs => p_seconds), leases = ch.leases + 1,
                replaced_owner = CASE WHEN picked.lease_until IS NOT NULL THEN picked.lease_owner END,
                replaced_until = picked.lease_until
            WHERE ch.campaign_id = k.id AND ch.chunk = picked.chunk;
            leased_campaign := k.id;
            leased_chunk := picked.chunk;
            leased_size := picked.size;
            leased_checkpoint := picked.checkpoint;
            leased_until := now() + make_interval(secs => p_seconds);
            -- A release clears the owner; an owner still set means its lease ran out.
            expired_owner := CASE WHEN picked.lease_until IS NOT NULL THEN picked.lease_owner END;
            expired_at := picked.lease_until;
            leased_environment := picked.environment;
            RETURN NEXT;
            RETURN;
        END LOOP;
    END $$;

    SELECT pushd.grant_roles();
    """#
}
