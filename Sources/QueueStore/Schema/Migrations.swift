/// The versioned schema of `pushd`, oldest first. A migration is never edited once
/// released; a change is a new version appended to the list.
extension Migrator {
    public static let migrations: [Migration] = [
        Migration(version: 1, name: "validation functions, transactional jobs and dead letters", sql: jobsV1),
        Migration(version: 2, name: "device tokens, registration and per-user fan-out", sql: tokensV2),
        Migration(version: 3, name: "campaigns, chunked targets and chunk leases", sql: campaignsV3),
        Migration(version: 4, name: "shared provider tokens", sql: providerTokensV4),
        Migration(version: 5, name: "notify only while a claimer sleeps", sql: wakeupV5),
        Migration(version: 6, name: "the chunk lease returns one row", sql: leaseRowsV6),
        Migration(version: 7, name: "campaign targets keep their registered token's environment", sql: targetEnvironmentsV7),
    ]

    /// Validation is done by functions that raise with the column's name and what is
    /// wrong, because a bare CHECK failure only names the constraint. Each CHECK runs
    /// the cheap inline test first and calls the function only when that fails (OR
    /// stops at the first true operand), so valid rows pay no PL/pgSQL call.
    static let jobsV1 = #"""
    CREATE FUNCTION pushd.fail_check(label text, constraint_name text, message text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        RAISE EXCEPTION '% %', label, message USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name;
    END $$;

    CREATE FUNCTION pushd.check_app(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('must be 1 to 64 letters, digits, dots, dashes or underscores starting with a letter or digit, got %L', left(value, 80)));
    END $$;

    CREATE FUNCTION pushd.check_device_token(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE bad text;
    BEGIN
        -- A bounded repetition like {32,100} makes the regex engine build a large automaton; length tests are cheap.
        IF value IS NULL OR (length(value) BETWEEN 64 AND 200 AND length(value) % 2 = 0 AND value !~ '[^0-9a-f]') THEN
            RETURN true;
        END IF;
        bad := substring(value FROM '[^0-9a-fA-F]');
        IF bad IS NOT NULL THEN
            RETURN pushd.fail_check(label, constraint_name,
                format('must be hexadecimal, found %L at position %s', bad, strpos(value, bad)));
        END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('must be an even number of hexadecimal digits from 64 to 200, got %s', length(value)));
    END $$;

    CREATE FUNCTION pushd.check_json_object(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        kind text;
        problem text;
    BEGIN
        IF value IS NULL THEN RETURN true; END IF;
        BEGIN
            kind := json_typeof(value::json);
        EXCEPTION WHEN invalid_text_representation THEN
            GET STACKED DIAGNOSTICS problem = PG_EXCEPTION_DETAIL;
            RETURN pushd.fail_check(label, constraint_name,
                format('must be a JSON object but is not valid JSON (%s)', coalesce(nullif(problem, ''), 'syntax error')));
        END;
        IF kind = 'object' THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, format('must be a JSON object, got a JSON %s', kind));
    END $$;

    CREATE FUNCTION pushd.check_push_type(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value IN ('alert', 'background', 'location', 'voip', 'complication', 'fileprovider',
                                      'mdm', 'liveactivity', 'pushtotalk', 'widgets', 'controls') THEN
            RETURN true;
        END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('must be one of alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets, controls; got %L', left(value, 80)));
    END $$;

    CREATE FUNCTION pushd.check_priority(value integer, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value IN (10, 5, 1) THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, format('must be 10, 5 or 1, got %s', value));
    END $$;

    CREATE FUNCTION pushd.check_collapse_id(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR octet_length(value) <= 64 THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, format('must be at most 64 bytes, got %s', octet_length(value)));
    END $$;

    CREATE FUNCTION pushd.check_environment(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value IN ('production', 'sandbox') THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, format('must be production or sandbox, got %L', left(value, 80)));
    END $$;

    -- Tokens arrive in whatever case the app logged them; APNs and the indexes want one form.
    -- The priority default depends on the push type (background pushes must use 5).
    CREATE FUNCTION pushd.jobs_normalise() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        NEW.device_token := lower(NEW.device_token);
        NEW.push_type := coalesce(NEW.push_type, 'alert');
        IF NEW.priority IS NULL THEN
            NEW.priority := CASE WHEN NEW.push_type = 'background' THEN 5 ELSE 10 END;
        END IF;
        RETURN NEW;
    END $$;

    -- One notification per statement with a constant payload: NOTIFY folds identical
    -- notifications of a transaction into one, so a bulk insert wakes pushd once.
    CREATE FUNCTION pushd.jobs_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('pushd_jobs', '');
        RETURN NULL;
    END $$;

    CREATE TABLE pushd.jobs (
        id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        app          text NOT NULL,
        device_token text NOT NULL,
        payload      text NOT NULL,
        push_type    text NOT NULL DEFAULT 'alert',
        priority     smallint NOT NULL,
        expiration   timestamptz,
        collapse_id  text,
        apns_id      uuid,
        dedupe_key   text,
        user_id      text,
        environment  text,
        run_at       timestamptz NOT NULL DEFAULT now(),
        attempts     integer NOT NULL DEFAULT 0,
        last_error   text,
        created_at   timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT jobs_app_valid CHECK (app ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' OR pushd.check_app(app, 'pushd.jobs.app', 'jobs_app_valid')),
        CONSTRAINT jobs_device_token_hex CHECK ((length(device_token) BETWEEN 64 AND 200 AND length(device_token) % 2 = 0 AND device_token !~ '[^0-9a-f]') OR pushd.check_device_token(device_token, 'pushd.jobs.device_token', 'jobs_device_token_hex')),
        CONSTRAINT jobs_payload_json_object CHECK (pushd.check_json_object(payload, 'pushd.jobs.payload', 'jobs_payload_json_object')),
        CONSTRAINT jobs_push_type_known CHECK (push_type IN ('alert', 'background', 'location', 'voip', 'complication', 'fileprovider', 'mdm', 'liveactivity', 'pushtotalk', 'widgets', 'controls') OR pushd.check_push_type(push_type, 'pushd.jobs.push_type', 'jobs_push_type_known')),
        CONSTRAINT jobs_priority_valid CHECK (priority IN (10, 5, 1) OR pushd.check_priority(priority, 'pushd.jobs.priority', 'jobs_priority_valid')),
        CONSTRAINT jobs_collapse_id_length CHECK (collapse_id IS NULL OR octet_length(collapse_id) <= 64 OR pushd.check_collapse_id(collapse_id, 'pushd.jobs.collapse_id', 'jobs_collapse_id_length')),
        CONSTRAINT jobs_environment_valid CHECK (environment IS NULL OR environment IN ('production', 'sandbox') OR pushd.check_environment(environment, 'pushd.jobs.environment', 'jobs_environment_valid')),
        CONSTRAINT jobs_attempts_valid CHECK (attempts >= 0)
    ) WITH (
        autovacuum_vacuum_scale_factor = 0.0,
        autovacuum_vacuum_threshold = 20000,
        autovacuum_vacuum_insert_scale_factor = 0.0,
        autovacuum_vacuum_insert_threshold = 50000,
        autovacuum_analyze_scale_factor = 0.0,
        autovacuum_analyze_threshold = 50000,
        autovacuum_vacuum_cost_delay = 0
    );

    -- The claim walks this index once per priority and stops at the first future run_at.
    CREATE INDEX jobs_due ON pushd.jobs (priority, run_at);
    CREATE UNIQUE INDEX jobs_dedupe ON pushd.jobs (app, dedupe_key, device_token) WHERE dedupe_key IS NOT NULL;

    CREATE TRIGGER jobs_normalise BEFORE INSERT OR UPDATE OF device_token, push_type, priority ON pushd.jobs
        FOR EACH ROW EXECUTE FUNCTION pushd.jobs_normalise();
    CREATE TRIGGER jobs_notify AFTER INSERT ON pushd.jobs
        FOR EACH STATEMENT EXECUTE FUNCTION pushd.jobs_notify();

    CREATE TABLE pushd.dead_jobs (
        id           bigint PRIMARY KEY,
        app          text NOT NULL,
        device_token text NOT NULL,
        payload      text NOT NULL,
        push_type    text NOT NULL,
        priority     smallint NOT NULL,
        expiration   timestamptz,
        collapse_id  text,
        apns_id      uuid,
        dedupe_key   text,
        user_id      text,
        environment  text,
        run_at       timestamptz NOT NULL,
        attempts     integer NOT NULL,
        last_error   text,
        created_at   timestamptz NOT NULL,
        status       integer,
        reason       text NOT NULL,
        failed_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX dead_jobs_app_failed_at ON pushd.dead_jobs (app, failed_at);
    """#

    static let tokensV2 = #"""
    CREATE FUNCTION pushd.device_tokens_normalise() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        NEW.token := lower(NEW.token);
        RETURN NEW;
    END $$;

    CREATE TABLE pushd.device_tokens (
        app            text NOT NULL,
        token          text NOT NULL,
        environment    text NOT NULL DEFAULT 'production',
        user_id        text,
        created_at     timestamptz NOT NULL DEFAULT now(),
        updated_at     timestamptz NOT NULL DEFAULT now(),
        invalidated_at timestamptz,
        invalid_reason text,
        PRIMARY KEY (app, token),
        CONSTRAINT device_tokens_app_valid CHECK (app ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' OR pushd.check_app(app, 'pushd.device_tokens.app', 'device_tokens_app_valid')),
        CONSTRAINT device_tokens_token_hex CHECK ((length(token) BETWEEN 64 AND 200 AND length(token) % 2 = 0 AND token !~ '[^0-9a-f]') OR pushd.check_device_token(token, 'pushd.device_tokens.token', 'device_tokens_token_hex')),
        CONSTRAINT device_tokens_environment_valid CHECK (environment IS NULL OR environment IN ('production', 'sandbox') OR pushd.check_environment(environment, 'pushd.device_tokens.environment', 'device_tokens_environment_valid'))
    ) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.05);

    CREATE INDEX device_tokens_live_user ON pushd.device_tokens (app, user_id)
        WHERE invalidated_at IS NULL AND user_id IS NOT NULL;
    CREATE TRIGGER device_tokens_normalise BEFORE INSERT OR UPDATE OF token ON pushd.device_tokens
        FOR EACH ROW EXECUTE FUNCTION pushd.device_tokens_normalise();

    -- Registration: called by applications every time a device reports its token.
    -- A new registration revives a pruned token and moves it to the given user (NULL detaches it).
    CREATE FUNCTION pushd.register_token(p_app text, p_token text, p_user_id text DEFAULT NULL,
                                         p_environment text DEFAULT 'production') RETURNS void
    LANGUAGE sql AS $$
        INSERT INTO pushd.device_tokens AS d (app, token, user_id, environment)
        VALUES (p_app, lower(p_token), p_user_id, p_environment)
        ON CONFLICT (app, token) DO UPDATE
            SET user_id = EXCLUDED.user_id, environment = EXCLUDED.environment, updated_at = now(),
                invalidated_at = NULL, invalid_reason = NULL
    $$;

    -- Fan-out: one job per live token of the user, in the caller's transaction.
    -- With a dedupe key, calling it again for the same user and key adds nothing.
    CREATE FUNCTION pushd.notify_user(p_app text, p_user_id text, p_payload text,
                                      p_push_type text DEFAULT 'alert', p_priority integer DEFAULT NULL,
                                      p_collapse_id text DEFAULT NULL, p_expiration timestamptz DEFAULT NULL,
                                      p_dedupe_key text DEFAULT NULL, p_run_at timestamptz DEFAULT now()) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE inserted integer;
    BEGIN
        INSERT INTO pushd.jobs (app, device_token, payload, push_type, priority, collapse_id, expiration,
                                dedupe_key, user_id, environment, run_at)
        SELECT p_app, d.token, p_payload, p_push_type, p_priority, p_collapse_id, p_expiration,
               p_dedupe_key, p_user_id, d.environment, coalesce(p_run_at, now())
        FROM pushd.device_tokens d
        WHERE d.app = p_app AND d.user_id = p_user_id AND d.invalidated_at IS NULL
        ON CONFLICT (app, dedupe_key, device_token) WHERE dedupe_key IS NOT NULL DO NOTHING;
        GET DIAGNOSTICS inserted = ROW_COUNT;
        RETURN inserted;
    END $$;
    """#

    static let campaignsV3 = #"""
    CREATE FUNCTION pushd.add_counts(a jsonb, b jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE AS $$
        SELECT coalesce(jsonb_object_agg(key, total), '{}'::jsonb)
        FROM (SELECT key, sum(value::bigint) AS total
              FROM (SELECT * FROM jsonb_each_text(coalesce(a, '{}'::jsonb))
                    UNION ALL SELECT * FROM jsonb_each_text(coalesce(b, '{}'::jsonb))) e
              GROUP BY key) s
    $$;

    CREATE FUNCTION pushd.check_json_objects(value text[], label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        item text;
        position integer := 0;
    BEGIN
        IF value IS NULL THEN RETURN true; END IF;
        FOREACH item IN ARRAY value LOOP
            position := position + 1;
            PERFORM pushd.check_json_object(item, format('%s[%s]', label, position), constraint_name);
        END LOOP;
        RETURN true;
    END $$;

    CREATE TABLE pushd.campaigns (
        id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        app              text NOT NULL,
        name             text NOT NULL,
        push_type        text NOT NULL DEFAULT 'alert',
        priority         smallint NOT NULL DEFAULT 10,
        environment      text,
        payload          text,
        collapse_id      text,
        expiration       timestamptz,
        status           text NOT NULL DEFAULT 'draft',
        start_at         timestamptz,
        rate_limit       integer,
        targets          bigint NOT NULL DEFAULT 0,
        sent             bigint NOT NULL DEFAULT 0,
        failed           bigint NOT NULL DEFAULT 0,
        failed_by_reason jsonb NOT NULL DEFAULT '{}',
        pruned           bigint NOT NULL DEFAULT 0,
        chunks_total     integer NOT NULL DEFAULT 0,
        chunks_done      integer NOT NULL DEFAULT 0,
        next_lease_at    timestamptz,
        created_at       timestamptz NOT NULL DEFAULT now(),
        started_at       timestamptz,
        finished_at      timestamptz,
        CONSTRAINT campaigns_app_valid CHECK (app ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' OR pushd.check_app(app, 'pushd.campaigns.app', 'campaigns_app_valid')),
        CONSTRAINT campaigns_name_present CHECK (length(name) BETWEEN 1 AND 200),
        CONSTRAINT campaigns_push_type_known CHECK (push_type IN ('alert', 'background', 'location', 'voip', 'complication', 'fileprovider', 'mdm', 'liveactivity', 'pushtotalk', 'widgets', 'controls') OR pushd.check_push_type(push_type, 'pushd.campaigns.push_type', 'campaigns_push_type_known')),
        CONSTRAINT campaigns_priority_valid CHECK (priority IN (10, 5, 1) OR pushd.check_priority(priority, 'pushd.campaigns.priority', 'campaigns_priority_valid')),
        CONSTRAINT campaigns_environment_valid CHECK (environment IS NULL OR environment IN ('production', 'sandbox') OR pushd.check_environment(environment, 'pushd.campaigns.environment', 'campaigns_environment_valid')),
        CONSTRAINT campaigns_payload_json_object CHECK (pushd.check_json_object(payload, 'pushd.campaigns.payload', 'campaigns_payload_json_object')),
        CONSTRAINT campaigns_collapse_id_length CHECK (collapse_id IS NULL OR octet_length(collapse_id) <= 64 OR pushd.check_collapse_id(collapse_id, 'pushd.campaigns.collapse_id', 'campaigns_collapse_id_length')),
        CONSTRAINT campaigns_status_known CHECK (status IN ('draft', 'scheduled', 'running', 'paused', 'done', 'cancelled')),
        CONSTRAINT campaigns_rate_limit_positive CHECK (rate_limit IS NULL OR rate_limit > 0)
    ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

    -- One row per chunk of about a thousand targets: a 10M campaign is ten thousand rows,
    -- written once at import and deleted in one statement when the campaign is over.
    CREATE TABLE pushd.campaign_targets (
        campaign_id bigint NOT NULL REFERENCES pushd.campaigns (id) ON DELETE CASCADE,
        chunk       integer NOT NULL,
        tokens      text[] NOT NULL,
        payloads    text[],
        PRIMARY KEY (campaign_id, chunk),
        CONSTRAINT campaign_targets_payloads_json_object
            CHECK (pushd.check_json_objects(payloads, 'pushd.campaign_targets.payloads', 'campaign_targets_payloads_json_object')),
        CONSTRAINT campaign_targets_payloads_match
            CHECK (payloads IS NULL OR cardinality(payloads) = cardinality(tokens))
    );
    -- Hex tokens do not compress; skipping pglz makes import and reads cheaper.
    ALTER TABLE pushd.campaign_targets ALTER COLUMN tokens SET STORAGE EXTERNAL;

    -- The mutable side of a chunk: lease and checkpoint, a few writes per thousand targets.
    CREATE TABLE pushd.campaign_chunks (
        campaign_id bigint NOT NULL REFERENCES pushd.campaigns (id) ON DELETE CASCADE,
        chunk       integer NOT NULL,
        size        integer NOT NULL,
        checkpoint  integer NOT NULL DEFAULT 0,
        lease_owner text,
        lease_until timestamptz,
        leases      integer NOT NULL DEFAULT 0,
        finished_at timestamptz,
        PRIMARY KEY (campaign_id, chunk),
        CONSTRAINT campaign_chunks_checkpoint_range CHECK (checkpoint BETWEEN 0 AND size)
    ) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 5000,
            autovacuum_vacuum_cost_delay = 0);
    CREATE INDEX campaign_chunks_open ON pushd.campaign_chunks (campaign_id, chunk) WHERE finished_at IS NULL;
    CREATE INDEX campaigns_active ON pushd.campaigns (id) WHERE status IN ('scheduled', 'running', 'paused');

    -- Audience from registered tokens: every live token of the campaign's app that matches the filter.
    -- Tokens pruned before this runs are not included.
    CREATE FUNCTION pushd.campaign_import_tokens(p_campaign_id bigint, p_environment text DEFAULT NULL,
                                                 p_user_ids text[] DEFAULT NULL, p_updated_since timestamptz DEFAULT NULL,
                                                 p_chunk_size integer DEFAULT 1000) RETURNS bigint
    LANGUAGE plpgsql AS $$
    DECLARE
        c pushd.campaigns;
        first_chunk integer;
        added bigint;
        chunks integer;
    BEGIN
        IF p_chunk_size IS NULL OR p_chunk_size < 1 OR p_chunk_size > 100000 THEN
            RAISE EXCEPTION 'chunk size must be between 1 and 100000, got %', p_chunk_size USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT * INTO c FROM pushd.campaigns WHERE id = p_campaign_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'campaign % does not exist', p_campaign_id USING ERRCODE = 'no_data_found';
        END IF;
        IF c.status IN ('done', 'cancelled') THEN
            RAISE EXCEPTION 'campaign % is %; targets can only be added before it ends', p_campaign_id, c.status
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        SELECT coalesce(max(chunk) + 1, 0) INTO first_chunk FROM pushd.campaign_chunks WHERE campaign_id = p_campaign_id;
        WITH src AS (
            SELECT d.token, (row_number() OVER (ORDER BY d.token) - 1) / p_chunk_size AS n
            FROM pushd.device_tokens d
            WHERE d.app = c.app AND d.invalidated_at IS NULL
              AND (p_environment IS NULL OR d.environment = p_environment)
              AND (p_user_ids IS NULL OR d.user_id = ANY (p_user_ids))
              AND (p_updated_since IS NULL OR d.updated_at >= p_updated_since)
        ), ins AS (
            INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens)
            SELECT p_campaign_id, first_chunk + n::integer, array_agg(token ORDER BY token) FROM src GROUP BY n
            RETURNING chunk, cardinality(tokens) AS size
        ), chunk_rows AS (
            INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size)
            SELECT p_campaign_id, chunk, size FROM ins
            RETURNING size
        )
        SELECT coalesce(sum(size), 0), count(*) INTO added, chunks FROM chunk_rows;
        UPDATE pushd.campaigns SET targets = targets + added, chunks_total = chunks_total + chunks WHERE id = p_campaign_id;
        RETURN added;
    END $$;

    -- Campaigns are tried oldest first; within one, the lowest unfinished chunk whose lease
    -- is free or expired. A rate-capped campaign hands out its next chunk only when the
    -- previous one's share of the cap has elapsed, which paces every instance together.
    CREATE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8)
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz)
    LANGUAGE plpgsql AS $$
    DECLARE
        k record;
        picked record;
    BEGIN
        FOR k IN SELECT c.id, c.rate_limit, c.status, c.started_at FROM pushd.campaigns c
                 WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
                   AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                 ORDER BY c.id
        LOOP
            SELECT ch.chunk, ch.size, ch.checkpoint INTO picked FROM pushd.campaign_chunks ch
            WHERE ch.campaign_id = k.id AND ch.finished_at IS NULL
              AND (ch.lease_until IS NULL OR ch.lease_until < now())
            ORDER BY ch.chunk LIMIT 1 FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF k.rate_limit IS NOT NULL OR k.status = 'scheduled' OR k.started_at IS NULL THEN
                UPDATE pushd.campaigns c
                SET status = 'running', started_at = coalesce(c.started_at, now()),
                    next_lease_at = CASE WHEN c.rate_limit IS NULL THEN NULL
                        ELSE greatest(coalesce(c.next_lease_at, now()), now())
                             + make_interval(secs => (picked.size - picked.checkpoint)::float8 / c.rate_limit) END
                WHERE c.id = k.id AND c.status IN ('running', 'scheduled')
                  AND (c.next_lease_at IS NULL OR c.next_lease_at <= now());
                CONTINUE WHEN NOT FOUND;
            END IF;
            UPDATE pushd.campaign_chunks ch
            SET lease_owner = p_owner, lease_until = now() + make_interval(secs => p_seconds), leases = ch.leases + 1
            WHERE ch.campaign_id = k.id AND ch.chunk = picked.chunk;
            leased_campaign := k.id;
            leased_chunk := picked.chunk;
            leased_size := picked.size;
            leased_checkpoint := picked.checkpoint;
            leased_until := now() + make_interval(secs => p_seconds);
            RETURN NEXT;
            RETURN;
        END LOOP;
    END $$;
    """#

    static let providerTokensV4 = #"""
    CREATE TABLE pushd.provider_tokens (
        key_id    text NOT NULL,
        team_id   text NOT NULL,
        token     text,
        issued_at timestamptz,
        minted_by text,
        PRIMARY KEY (key_id, team_id)
    );
    """#

    /// NOTIFY takes a database-wide lock from pre-commit until the commit's WAL flush
    /// is done, so transactions that notify commit one at a time: a plain insert
    /// trigger caps application inserts at one per flush (about 300/s on a disk with
    /// 3 ms fsync). Claimers that are busy or polling do not need the notification,
    /// so inserts notify only while a claimer is registered as asleep in
    /// `pushd.job_waiters`. The shared advisory lock lets a claimer that is about to
    /// sleep wait for every insert that might have missed its registration to commit
    /// (`JobQueue.sleepUntilJobs`), so no wake-up is lost.
    static let wakeupV5 = #"""
    CREATE UNLOGGED TABLE pushd.job_waiters (
        pid   integer PRIMARY KEY,
        since timestamptz NOT NULL DEFAULT now()
    );

    CREATE OR REPLACE FUNCTION pushd.jobs_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock_shared(\#(JobQueue.wakeupLockKey));
        IF EXISTS (SELECT 1 FROM pushd.job_waiters) THEN
            PERFORM pg_notify('pushd_jobs', '');
        END IF;
        RETURN NULL;
    END $$;
    """#

    /// A set-returning function is planned as 1000 rows, which turns the join from the
    /// leased chunk to its targets into a scan of every chunk row of every campaign.
    static let leaseRowsV6 = #"""
    ALTER FUNCTION pushd.lease_campaign_chunk(text, float8) ROWS 1;
    """#

    /// A development build's token is known only to the sandbox host: a campaign built from
    /// registered tokens sends each to its own environment. NULL (file imports) means the
    /// campaign's environment.
    static let targetEnvironmentsV7 = #"""
    ALTER TABLE pushd.campaign_targets ADD COLUMN environments text[];
    ALTER TABLE pushd.campaign_targets ADD CONSTRAINT campaign_targets_environments_match
        CHECK (environments IS NULL OR cardinality(environments) = cardinality(tokens));

    CREATE OR REPLACE FUNCTION pushd.campaign_import_tokens(p_campaign_id bigint, p_environment text DEFAULT NULL,
                                                           p_user_ids text[] DEFAULT NULL, p_updated_since timestamptz DEFAULT NULL,
                                                           p_chunk_size integer DEFAULT 1000) RETURNS bigint
    LANGUAGE plpgsql AS $$
    DECLARE
        c pushd.campaigns;
        first_chunk integer;
        added bigint;
        chunks integer;
    BEGIN
        IF p_chunk_size IS NULL OR p_chunk_size < 1 OR p_chunk_size > 100000 THEN
            RAISE EXCEPTION 'chunk size must be between 1 and 100000, got %', p_chunk_size USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT * INTO c FROM pushd.campaigns WHERE id = p_campaign_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'campaign % does not exist', p_campaign_id USING ERRCODE = 'no_data_found';
        END IF;
        IF c.status IN ('done', 'cancelled') THEN
            RAISE EXCEPTION 'campaign % is %; targets can only be added before it ends', p_campaign_id, c.status
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        SELECT coalesce(max(chunk) + 1, 0) INTO first_chunk FROM pushd.campaign_chunks WHERE campaign_id = p_campaign_id;
        WITH src AS (
            SELECT d.token, d.environment, (row_number() OVER (ORDER BY d.token) - 1) / p_chunk_size AS n
            FROM pushd.device_tokens d
            WHERE d.app = c.app AND d.invalidated_at IS NULL
              AND (p_environment IS NULL OR d.environment = p_environment)
              AND (p_user_ids IS NULL OR d.user_id = ANY (p_user_ids))
              AND (p_updated_since IS NULL OR d.updated_at >= p_updated_since)
        ), ins AS (
            INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, environments)
            SELECT p_campaign_id, first_chunk + n::integer, array_agg(token ORDER BY token), array_agg(environment ORDER BY token)
            FROM src GROUP BY n
            RETURNING chunk, cardinality(tokens) AS size
        ), chunk_rows AS (
            INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size)
            SELECT p_campaign_id, chunk, size FROM ins
            RETURNING size
        )
        SELECT coalesce(sum(size), 0), count(*) INTO added, chunks FROM chunk_rows;
        UPDATE pushd.campaigns SET targets = targets + added, chunks_total = chunks_total + chunks WHERE id = p_campaign_id;
        RETURN added;
    END $$;
    """#
}
