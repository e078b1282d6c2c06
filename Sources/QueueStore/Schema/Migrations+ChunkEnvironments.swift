extension Migrator {
    /// A campaign waiting for APNs (`CampaignWorker.stopWhileDown`) was passed over whole at
    /// the lease, so while APNs was down for one environment the campaign's chunks of the other
    /// waited with it: a campaign imported in several `--from-tokens` runs held a later run's
    /// production chunks behind an earlier run's stopped sandbox chunk for as long as a sandbox
    /// outage lasted, and sent none of them.
    ///
    /// Registered tokens are now chunked by environment apart, so that no chunk mixes them (the
    /// chunk where they met did: an outage of one had it set that one's targets aside one
    /// parked row each, or hold the other's), and a chunk records the environment all its
    /// targets go to (`campaign_chunks.environment`; NULL when they go to the campaign's or the
    /// app's, as a file import's do, or to both; open chunks imported before are tagged by the migration
    /// when all their targets carry one environment). The lease is told which campaigns'
    /// chunks of each environment to pass over (`p_skip_production`, `p_skip_sandbox`): those
    /// wait, the campaign's other chunks are leased. The lease returns the chunk's environment,
    /// so a worker passes a campaign over whole only when a chunk it stopped has none recorded.
    /// The four-argument lease is kept unchanged for instances of the previous version that
    /// share the database during an upgrade.
    ///
    /// The import of registered tokens also stops comparing every token with every target
    /// already in the campaign (`SET enable_nestloop = off`): a second `--from-tokens` run into
    /// a campaign took a minute at tens of thousands of targets.
    static let chunkEnvironmentsV35 = #"""
    ALTER TABLE pushd.campaign_chunks ADD COLUMN environment text
        CONSTRAINT campaign_chunks_environment_known CHECK (environment IN ('production', 'sandbox'));

    -- The open chunks imported before, whose targets all carry one environment (version 34's
    -- registered tokens but the chunk where the environments met), are tagged too: a campaign
    -- waiting for an outage then passes over only them, its later imports' chunks of the
    -- other environment are leased. An element NULL makes `= ALL` NULL: such a chunk stays
    -- untagged.
    -- Written to be driven by the open chunks (their partial index), each looking up its own
    -- targets row, so that the targets of finished chunks, kept until they are dropped, are
    -- normally not read.
    UPDATE pushd.campaign_chunks ch SET environment = open.environment
    FROM (SELECT o.campaign_id, o.chunk,
                 (SELECT t.environments[1] FROM pushd.campaign_targets t
                  WHERE t.campaign_id = o.campaign_id AND t.chunk = o.chunk
                    AND t.environments[1] IS NOT NULL AND t.environments[1] = ALL (t.environments)) AS environment
          FROM pushd.campaign_chunks o WHERE o.finished_at IS NULL) open
    WHERE ch.campaign_id = open.campaign_id AND ch.chunk = open.chunk AND open.environment IS NOT NULL;

    CREATE OR REPLACE FUNCTION pushd.campaign_import_tokens_counted(p_campaign_id bigint, p_environment text DEFAULT NULL,
                                                         p_user_ids text[] DEFAULT NULL, p_updated_since timestamptz DEFAULT NULL,
                                                         p_chunk_size integer DEFAULT 1000,
                                                         OUT imported bigint, OUT duplicates bigint)
    -- The tokens already in the campaign are left out by an anti-join that the planner, inside
    -- this function, made a nested loop: every registered token compared with every target,
    -- 58 s for 2,000 tokens added to a campaign of 31,000 (hours at a million). Hashed, 0.3 s
    -- for 20,000.
    SET enable_nestloop = off
    LANGUAGE plpgsql AS $$
    DECLARE
        c pushd.campaigns;
        first_chunk integer;
        matched bigint;
        chunks integer;
        closed text;
    BEGIN
        IF p_chunk_size IS NULL OR p_chunk_size < 1 OR p_chunk_size > 100000 THEN
            RAISE EXCEPTION 'chunk size must be between 1 and 100000, got %', p_chunk_size USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Not locked: the workers write this row while the audience is read.
        SELECT * INTO c FROM pushd.campaigns WHERE id = p_campaign_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'campaign % does not exist', p_campaign_id USING ERRCODE = 'no_data_found';
        END IF;
        IF c.status IN ('done', 'cancelled') THEN
            RAISE EXCEPTION 'campaign % is %; targets can only be added before it ends', p_campaign_id, c.status
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        PERFORM pushd.campaign_import_lock(p_campaign_id);
        SELECT coalesce(max(chunk) + 1, 0) INTO first_chunk FROM pushd.campaign_chunks WHERE campaign_id = p_campaign_id;
        WITH matching AS (
            SELECT d.token, d.environment FROM pushd.device_tokens d
            WHERE d.app = c.app AND d.invalidated_at IS NULL
              AND (p_environment IS NULL OR d.environment = p_environment)
              AND (p_user_ids IS NULL OR d.user_id = ANY (p_user_ids))
              AND (p_updated_since IS NULL OR d.updated_at >= p_updated_since)
        ), src AS (
            -- Each environment is chunked apart: no chunk mixes them (one per import did).
            SELECT m.token, m.environment, (row_number() OVER (PARTITION BY m.environment ORDER BY m.token) - 1) / p_chunk_size AS n
            FROM matching m
            WHERE NOT EXISTS (SELECT 1 FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens) AS e(token)
                              WHERE t.campaign_id = p_campaign_id AND e.token = m.token)
        ), ins AS (
            INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, environments)
            SELECT p_campaign_id, first_chunk + (row_number() OVER (ORDER BY environment, n) - 1)::integer,
                   array_agg(token ORDER BY token), array_agg(environment ORDER BY token)
            FROM src GROUP BY environment, n
            RETURNING chunk, cardinality(tokens) AS size, environments[1] AS environment
        ), chunk_rows AS (
            INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size, environment)
            SELECT p_campaign_id, chunk, size, environment FROM ins
            RETURNING size
        )
        SELECT coalesce(sum(size), 0), count(*), (SELECT count(*) FROM matching) INTO imported, chunks, matched FROM chunk_rows;
        duplicates := matched - imported;
        IF chunks > 0 THEN
            UPDATE pushd.campaigns SET targets = targets + imported, chunks_total = chunks_total + chunks
            WHERE id = p_campaign_id AND status NOT IN ('done', 'cancelled');
            IF NOT FOUND THEN
                SELECT status INTO closed FROM pushd.campaigns WHERE id = p_campaign_id;
                RAISE EXCEPTION 'campaign % became % while its targets were being added; none was added', p_campaign_id, closed
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
        END IF;
    END $$;

    CREATE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[], p_skip bigint[],
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
            leased_environment := picked.environment;
            RETURN NEXT;
            RETURN;
        END LOOP;
    END $$;

    SELECT pushd.grant_roles();
    """#
}
