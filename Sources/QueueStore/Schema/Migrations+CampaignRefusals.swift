extension Migrator {
    /// A campaign stored before an upgrade added one of the campaign CHECKs NOT VALID (app name,
    /// payload shape or size, priority and expiration rules) may break it: PostgreSQL then
    /// refuses every UPDATE of its row, so its progress, pause and cancel could not be written,
    /// and a chunk whose progress was refused was leased and sent again when its lease ran out.
    ///
    /// Such a campaign is held in `pushd.campaign_refusals` instead of in its own row, which
    /// cannot be written: the check and its message, and the counters its chunks recorded while
    /// held (they cannot go into the row either). The lease skips held campaigns; a lease whose
    /// write of the row is refused holds the campaign instead of failing every lease of every
    /// campaign. Correcting the offending column (an UPDATE of app, push_type, priority,
    /// payload, collapse_id or expiration that the checks accept) ends the hold, adding the
    /// held counters to the row in the same statement; deleting the campaign ends it too.
    static let campaignRefusalsV30 = #"""
    CREATE TABLE pushd.campaign_refusals (
        campaign_id      bigint PRIMARY KEY REFERENCES pushd.campaigns (id) ON DELETE CASCADE,
        constraint_name  text,
        message          text NOT NULL,
        refused_at       timestamptz NOT NULL DEFAULT now(),
        sent             bigint NOT NULL DEFAULT 0,
        failed           bigint NOT NULL DEFAULT 0,
        pruned           bigint NOT NULL DEFAULT 0,
        pruned_kept      bigint NOT NULL DEFAULT 0,
        failed_by_reason jsonb NOT NULL DEFAULT '{}',
        chunks_done      integer NOT NULL DEFAULT 0
    );

    CREATE FUNCTION pushd.campaign_refusal_lifted() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        held pushd.campaign_refusals;
    BEGIN
        DELETE FROM pushd.campaign_refusals WHERE campaign_id = NEW.id RETURNING * INTO held;
        IF FOUND THEN
            NEW.sent := NEW.sent + held.sent;
            NEW.failed := NEW.failed + held.failed;
            NEW.pruned := NEW.pruned + held.pruned;
            NEW.pruned_kept := NEW.pruned_kept + held.pruned_kept;
            NEW.failed_by_reason := pushd.add_counts(NEW.failed_by_reason, held.failed_by_reason);
            NEW.chunks_done := NEW.chunks_done + held.chunks_done;
        END IF;
        RETURN NEW;
    END $$;
    REVOKE EXECUTE ON FUNCTION pushd.campaign_refusal_lifted() FROM PUBLIC;
    -- Only an UPDATE naming a column the checks look at: progress writes do not fire it.
    CREATE TRIGGER campaign_refusal_lifted
        BEFORE UPDATE OF app, push_type, priority, payload, collapse_id, expiration ON pushd.campaigns
        FOR EACH ROW EXECUTE FUNCTION pushd.campaign_refusal_lifted();

    CREATE OR REPLACE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[])
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz,
                   expired_owner text, expired_at timestamptz)
    LANGUAGE plpgsql ROWS 1 AS $$
    DECLARE
        k record;
        picked record;
        refused_check text;
        refused_message text;
    BEGIN
        FOR k IN SELECT c.id, c.rate_limit, c.status, c.started_at FROM pushd.campaigns c
                 WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
                   AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                   AND c.app = ANY (p_apps)
                   AND NOT EXISTS (SELECT 1 FROM pushd.campaign_refusals r WHERE r.campaign_id = c.id)
                 ORDER BY c.id
        LOOP
            SELECT ch.chunk, ch.size, ch.checkpoint, ch.lease_owner, ch.lease_until INTO picked FROM pushd.campaign_chunks ch
            WHERE ch.campaign_id = k.id AND ch.finished_at IS NULL
              AND (ch.lease_until IS NULL OR ch.lease_until < now())
            ORDER BY ch.chunk LIMIT 1 FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF k.rate_limit IS NOT NULL OR k.status = 'scheduled' OR k.started_at IS NULL THEN
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
    DO $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pushd_readonly') THEN
            GRANT SELECT ON pushd.campaign_refusals TO pushd_readonly;
        END IF;
    END $$;
    """#
}
