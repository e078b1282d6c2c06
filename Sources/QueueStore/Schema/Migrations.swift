import Posix

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
        Migration(version: 7, name: "claim and lease only the apps an instance is configured for", sql: claimByAppV7),
        Migration(version: 8, name: "a campaign's audience holds each token once", sql: uniqueTargetsV8),
        Migration(version: 9, name: "campaigns count tokens kept by the timestamp rule", sql: prunedKeptV9),
        Migration(version: 10, name: "registry of running instances", sql: instancesV10),
        Migration(version: 11, name: "one rule for app names, the configuration's", sql: appNamesV11),
        Migration(version: 12, name: "payload rules that need only the row are checked at insert", sql: payloadRulesV12),
        Migration(version: 13, name: "retry windows count from a job's first send", sql: firstAttemptV13),
        Migration(version: 14, name: "campaign targets parked while they wait for a retry", sql: campaignRetriesV14),
        Migration(version: 15, name: "a rate-capped campaign's lease schedule makes up for late leases", sql: leasePaceV15),
        Migration(version: 16, name: "campaign targets keep their registered token's environment", sql: targetEnvironmentsV16),
        Migration(version: 17, name: "broadcast channels and broadcast jobs", sql: broadcastV17),
        Migration(version: 18, name: "the chunk lease names the worker whose lease expired", sql: leaseTakeoverV18),
        Migration(version: 19, name: "the types of the aps values are checked at insert", sql: apsValuesV19),
        // The roles migration stays last: its grants cover every table created before it.
        Migration(version: 20, name: "least-privilege roles: pushd_enqueue, pushd_daemon, pushd_readonly", sql: rolesV20),
        Migration(version: 21, name: "broadcast retry windows count from a broadcast's first send", sql: broadcastFirstAttemptV21),
        Migration(version: 22, name: "Apple's header and Live Activity rules the row can show are checked at insert", sql: appleRulesV22),
        Migration(version: 23, name: "instances report the apps APNs takes no notifications of", sql: instanceOutagesV23),
        Migration(version: 24, name: "a broadcast inserted into pushd.jobs is refused naming pushd.jobs", sql: broadcastRedirectChecksV24),
        Migration(version: 25, name: "the payload shape test is planned once per session, not once per INSERT", sql: shapePlannedOnceV25),
        Migration(version: 26, name: "a broadcast or channel request being sent is known by its lease", sql: broadcastLeasesV26),
        Migration(version: 27, name: "instances advertise the environments of each app they can send to", sql: instanceEnvironmentsV27),
        Migration(version: 28, name: "a job's dedupe key stays taken for a retention period, not only while the job is pending", sql: dedupeLedgerV28),
        Migration(version: 29, name: "Apple's PushToTalk, Live Activity priority and broadcast rules are checked at insert", sql: pushTypeRulesV29),
        Migration(version: 30, name: "a campaign whose row a NOT VALID check refuses is held, not sent again", sql: campaignRefusalsV30),
        Migration(version: 31, name: "times pushd cannot read (infinity, years after 9999) are refused at insert", sql: readableTimesV31),
        Migration(version: 32, name: "an import into a running campaign does not lock its row while it reads the audience", sql: campaignImportsV32),
        Migration(version: 33, name: "the chunk lease passes over the capped campaigns a process is already pacing", sql: cappedFairnessV33),
        Migration(version: 34, name: "registered tokens are grouped into chunks by environment", sql: environmentChunksV34),
        Migration(version: 35, name: "the lease passes over a waiting campaign's chunks of the environment APNs is down for, not its others", sql: chunkEnvironmentsV35),
        Migration(version: 36, name: "a chunk given back after a lease whose answer was lost keeps the lease it replaced", sql: leaseReplacedV36),
        Migration(version: 37, name: "a broadcast or channel request claim names its claimer and keeps the lease it replaced", sql: claimOwnersV37),
    ]

    /// Validation is done by functions that raise with the column's name and what is
    /// wrong, because a bare CHECK failure only names the constraint. Each CHECK runs
    /// the cheap inline test first and calls the function only when that fails (OR
    /// stops at the first true operand), so valid rows pay no PL/pgSQL call (except the
    /// payload shape test since version 24, which is PL/pgSQL to keep its plan).
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

    /// Instances with different app lists share one database: each claims jobs and leases
    /// chunks only of its own apps, and the rest stays queued for an instance that knows
    /// them. The claim walks one index range per (app, priority), so jobs of other apps,
    /// however many are due, are never read; the index replaces `jobs_due`, so an insert
    /// still maintains the same number of indexes.
    static let claimByAppV7 = #"""
    CREATE INDEX jobs_claim ON pushd.jobs (app, priority, run_at);
    DROP INDEX pushd.jobs_due;

    DROP FUNCTION pushd.lease_campaign_chunk(text, float8);
    CREATE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[])
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz)
    LANGUAGE plpgsql ROWS 1 AS $$
    DECLARE
        k record;
        picked record;
    BEGIN
        FOR k IN SELECT c.id, c.rate_limit, c.status, c.started_at FROM pushd.campaigns c
                 WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
                   AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                   AND c.app = ANY (p_apps)
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

    /// A token already in the campaign (from a file or an earlier import) is not added
    /// again, so a campaign reaches each device once however its audience was assembled.
    /// `campaign_import_tokens` keeps its signature and result for applications that
    /// call it; `campaign_import_tokens_counted` also says how many were left out.
    static let uniqueTargetsV8 = #"""
    CREATE FUNCTION pushd.campaign_import_tokens_counted(p_campaign_id bigint, p_environment text DEFAULT NULL,
                                                         p_user_ids text[] DEFAULT NULL, p_updated_since timestamptz DEFAULT NULL,
                                                         p_chunk_size integer DEFAULT 1000,
                                                         OUT imported bigint, OUT duplicates bigint)
    LANGUAGE plpgsql AS $$
    DECLARE
        c pushd.campaigns;
        first_chunk integer;
        matched bigint;
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
        WITH matching AS (
            SELECT d.token FROM pushd.device_tokens d
            WHERE d.app = c.app AND d.invalidated_at IS NULL
              AND (p_environment IS NULL OR d.environment = p_environment)
              AND (p_user_ids IS NULL OR d.user_id = ANY (p_user_ids))
              AND (p_updated_since IS NULL OR d.updated_at >= p_updated_since)
        ), src AS (
            SELECT m.token, (row_number() OVER (ORDER BY m.token) - 1) / p_chunk_size AS n
            FROM matching m
            WHERE NOT EXISTS (SELECT 1 FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens) AS e(token)
                              WHERE t.campaign_id = p_campaign_id AND e.token = m.token)
        ), ins AS (
            INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens)
            SELECT p_campaign_id, first_chunk + n::integer, array_agg(token ORDER BY token) FROM src GROUP BY n
            RETURNING chunk, cardinality(tokens) AS size
        ), chunk_rows AS (
            INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size)
            SELECT p_campaign_id, chunk, size FROM ins
            RETURNING size
        )
        SELECT coalesce(sum(size), 0), count(*), (SELECT count(*) FROM matching) INTO imported, chunks, matched FROM chunk_rows;
        duplicates := matched - imported;
        UPDATE pushd.campaigns SET targets = targets + imported, chunks_total = chunks_total + chunks WHERE id = p_campaign_id;
    END $$;

    CREATE OR REPLACE FUNCTION pushd.campaign_import_tokens(p_campaign_id bigint, p_environment text DEFAULT NULL,
                                                            p_user_ids text[] DEFAULT NULL, p_updated_since timestamptz DEFAULT NULL,
                                                            p_chunk_size integer DEFAULT 1000) RETURNS bigint
    LANGUAGE sql AS $$
        SELECT imported FROM pushd.campaign_import_tokens_counted(p_campaign_id, p_environment, p_user_ids, p_updated_since, p_chunk_size)
    $$;
    """#

    /// `pruned` counts tokens a campaign actually invalidated; 410 answers for tokens the
    /// app registered again after APNs' timestamp are kept, and counted here.
    static let prunedKeptV9 = #"""
    ALTER TABLE pushd.campaigns ADD COLUMN pruned_kept bigint NOT NULL DEFAULT 0;
    """#

    /// A job scheduled for later (`run_at`) has not begun to wait when it is inserted: its
    /// retry windows and outage budget count from its first send, recorded here.
    static let firstAttemptV13 = #"""
    ALTER TABLE pushd.jobs ADD COLUMN first_attempt_at timestamptz;
    ALTER TABLE pushd.dead_jobs ADD COLUMN first_attempt_at timestamptz;
    """#

    /// Campaign targets waiting for a retry, so that their chunk can finish and its worker
    /// send other targets meanwhile (`CampaignStore.finish(_:_:_:parking:)`). Written only
    /// for targets APNs did not take, so a storm costs rows, an ordinary campaign almost none.
    static let campaignRetriesV14 = #"""
    CREATE TABLE pushd.campaign_retries (
        campaign_id      bigint NOT NULL REFERENCES pushd.campaigns (id) ON DELETE CASCADE,
        chunk            integer NOT NULL,
        position         integer NOT NULL,
        token            text NOT NULL,
        payload          text,
        due_at           timestamptz NOT NULL,
        attempts         integer NOT NULL,
        first_attempt_at timestamptz NOT NULL,
        last_error       text NOT NULL,
        PRIMARY KEY (campaign_id, chunk, position)
    );
    CREATE INDEX campaign_retries_due ON pushd.campaign_retries (due_at);
    """#

    /// The next lease of a rate-capped campaign was scheduled from `now()`, so every lease
    /// taken late (a worker busy, or waking a little after the due time) was lost for good and
    /// the campaign ran below its cap. The schedule now advances from the previous due time:
    /// a late lease is made up, up to 200 ms of arrears, which bounds the burst after an idle
    /// spell (a pause, or no worker free) to a fifth of a second's worth of the cap.
    static let leasePaceV15 = #"""
    CREATE OR REPLACE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[])
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz)
    LANGUAGE plpgsql ROWS 1 AS $$
    DECLARE
        k record;
        picked record;
    BEGIN
        FOR k IN SELECT c.id, c.rate_limit, c.status, c.started_at FROM pushd.campaigns c
                 WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
                   AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                   AND c.app = ANY (p_apps)
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
                        ELSE greatest(coalesce(c.next_lease_at, now()), now() - interval '200 milliseconds')
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

    /// A chunk handed on because its worker stopped renewing the lease (killed, hung, cut
    /// off from the database) is news for an operator; one released by its worker is not.
    /// The lease says which, and whose lease expired when.
    static let leaseTakeoverV18 = #"""
    DROP FUNCTION pushd.lease_campaign_chunk(text, float8, text[]);
    CREATE FUNCTION pushd.lease_campaign_chunk(p_owner text, p_seconds float8, p_apps text[])
    RETURNS TABLE (leased_campaign bigint, leased_chunk integer, leased_size integer,
                   leased_checkpoint integer, leased_until timestamptz,
                   expired_owner text, expired_at timestamptz)
    LANGUAGE plpgsql ROWS 1 AS $$
    DECLARE
        k record;
        picked record;
    BEGIN
        FOR k IN SELECT c.id, c.rate_limit, c.status, c.started_at FROM pushd.campaigns c
                 WHERE (c.status = 'running' OR (c.status = 'scheduled' AND c.start_at <= now()))
                   AND (c.next_lease_at IS NULL OR c.next_lease_at <= now())
                   AND c.app = ANY (p_apps)
                 ORDER BY c.id
        LOOP
            SELECT ch.chunk, ch.size, ch.checkpoint, ch.lease_owner, ch.lease_until INTO picked FROM pushd.campaign_chunks ch
            WHERE ch.campaign_id = k.id AND ch.finished_at IS NULL
              AND (ch.lease_until IS NULL OR ch.lease_until < now())
            ORDER BY ch.chunk LIMIT 1 FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF k.rate_limit IS NOT NULL OR k.status = 'scheduled' OR k.started_at IS NULL THEN
                UPDATE pushd.campaigns c
                SET status = 'running', started_at = coalesce(c.started_at, now()),
                    next_lease_at = CASE WHEN c.rate_limit IS NULL THEN NULL
                        ELSE greatest(coalesce(c.next_lease_at, now()), now() - interval '200 milliseconds')
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
            -- A release clears the owner; an owner still set means its lease ran out.
            expired_owner := CASE WHEN picked.lease_until IS NOT NULL THEN picked.lease_owner END;
            expired_at := picked.lease_until;
            RETURN NEXT;
            RETURN;
        END LOOP;
    END $$;
    """#

    /// A development build's token is known only to the sandbox host: a campaign built from
    /// registered tokens sends each to its own environment. NULL (file imports) means the
    /// campaign's environment.
    static let targetEnvironmentsV16 = #"""
    ALTER TABLE pushd.campaign_targets ADD COLUMN environments text[];
    ALTER TABLE pushd.campaign_targets ADD CONSTRAINT campaign_targets_environments_match
        CHECK (environments IS NULL OR cardinality(environments) = cardinality(tokens));
    ALTER TABLE pushd.campaign_retries ADD COLUMN environment text;

    CREATE OR REPLACE FUNCTION pushd.campaign_import_tokens_counted(p_campaign_id bigint, p_environment text DEFAULT NULL,
                                                         p_user_ids text[] DEFAULT NULL, p_updated_since timestamptz DEFAULT NULL,
                                                         p_chunk_size integer DEFAULT 1000,
                                                         OUT imported bigint, OUT duplicates bigint)
    LANGUAGE plpgsql AS $$
    DECLARE
        c pushd.campaigns;
        first_chunk integer;
        matched bigint;
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
        WITH matching AS (
            SELECT d.token, d.environment FROM pushd.device_tokens d
            WHERE d.app = c.app AND d.invalidated_at IS NULL
              AND (p_environment IS NULL OR d.environment = p_environment)
              AND (p_user_ids IS NULL OR d.user_id = ANY (p_user_ids))
              AND (p_updated_since IS NULL OR d.updated_at >= p_updated_since)
        ), src AS (
            SELECT m.token, m.environment, (row_number() OVER (ORDER BY m.token) - 1) / p_chunk_size AS n
            FROM matching m
            WHERE NOT EXISTS (SELECT 1 FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens) AS e(token)
                              WHERE t.campaign_id = p_campaign_id AND e.token = m.token)
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
        SELECT coalesce(sum(size), 0), count(*), (SELECT count(*) FROM matching) INTO imported, chunks, matched FROM chunk_rows;
        duplicates := matched - imported;
        UPDATE pushd.campaigns SET targets = targets + imported, chunks_total = chunks_total + chunks WHERE id = p_campaign_id;
    END $$;
    """#

    /// Broadcast channels (`pushd.channels`, created and deleted through functions that pushd
    /// carries out against APNs) and broadcast jobs: an INSERT into `pushd.jobs` with a
    /// `channel_id` instead of a device token is moved by a trigger into
    /// `pushd.broadcast_jobs`, so the device-token lane never sees it. Both are claimed by
    /// lease (`run_at` pushed forward while in flight): a dead worker's rows come back due.
    static let broadcastV17 = #"""
    CREATE FUNCTION pushd.check_channel_id(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR (length(value) BETWEEN 4 AND 128 AND length(value) % 4 = 0 AND value ~ '^[A-Za-z0-9+/]+={0,2}$') THEN
            RETURN true;
        END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('must be the base64 channel id APNs returned (A-Z a-z 0-9 + / with = padding, groups of 4, at most 128), got %L', left(value, 80)));
    END $$;

    CREATE FUNCTION pushd.check_storage_policy(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value IN ('none', 'most-recent') THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, format('must be none or most-recent, got %L', left(value, 80)));
    END $$;

    CREATE TABLE pushd.channels (
        id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        app            text NOT NULL,
        channel_id     text,
        environment    text,
        storage_policy text NOT NULL DEFAULT 'none',
        -- pending_create, active, pending_delete, deleted, failed
        state          text NOT NULL,
        outcome        text,
        attempts       integer NOT NULL DEFAULT 0,
        run_at         timestamptz NOT NULL DEFAULT now(),
        requested_at   timestamptz NOT NULL DEFAULT now(),
        created_at     timestamptz,
        deleted_at     timestamptz,
        CONSTRAINT channels_app_valid CHECK (pushd.check_app(app, 'pushd.channels.app', 'channels_app_valid')),
        CONSTRAINT channels_channel_id_valid CHECK (pushd.check_channel_id(channel_id, 'pushd.channels.channel_id', 'channels_channel_id_valid')),
        CONSTRAINT channels_environment_valid CHECK (pushd.check_environment(environment, 'pushd.channels.environment', 'channels_environment_valid')),
        CONSTRAINT channels_storage_policy_valid CHECK (pushd.check_storage_policy(storage_policy, 'pushd.channels.storage_policy', 'channels_storage_policy_valid')),
        CONSTRAINT channels_state_known CHECK (state IN ('pending_create', 'active', 'pending_delete', 'deleted', 'failed'))
    );
    CREATE UNIQUE INDEX channels_app_channel ON pushd.channels (app, channel_id) WHERE channel_id IS NOT NULL;
    CREATE INDEX channels_pending ON pushd.channels (run_at) WHERE state IN ('pending_create', 'pending_delete');

    CREATE FUNCTION pushd.channels_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('pushd_channels', '');
        RETURN NULL;
    END $$;
    CREATE TRIGGER channels_notify AFTER INSERT OR UPDATE OF state ON pushd.channels
        FOR EACH STATEMENT EXECUTE FUNCTION pushd.channels_notify();

    -- Asks pushd to create a channel; returns the row id. The channel id appears in the row
    -- (state 'active') once APNs has answered; a refusal leaves state 'failed' and the reason
    -- in outcome. NULL environment: the app's configured environment.
    CREATE FUNCTION pushd.create_channel(p_app text, p_storage_policy text DEFAULT 'none', p_environment text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql AS $$
        INSERT INTO pushd.channels (app, environment, storage_policy, state)
        VALUES (p_app, p_environment, coalesce(p_storage_policy, 'none'), 'pending_create')
        RETURNING id;
    $$;

    -- Asks pushd to delete a channel; returns the row id. A channel not created through
    -- pushd (no row yet) gets a row, so its deletion is recorded the same way.
    CREATE FUNCTION pushd.delete_channel(p_app text, p_channel_id text, p_environment text DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE row_id bigint;
    BEGIN
        UPDATE pushd.channels SET state = 'pending_delete', run_at = now(), attempts = 0,
                                  environment = coalesce(p_environment, environment)
        WHERE app = p_app AND channel_id = p_channel_id AND state IN ('active', 'pending_delete', 'failed')
        RETURNING id INTO row_id;
        IF row_id IS NULL THEN
            INSERT INTO pushd.channels (app, channel_id, environment, state)
            VALUES (p_app, p_channel_id, p_environment, 'pending_delete')
            ON CONFLICT (app, channel_id) WHERE channel_id IS NOT NULL DO UPDATE SET state = 'pending_delete', run_at = now(), attempts = 0
            RETURNING id INTO row_id;
        END IF;
        RETURN row_id;
    END $$;

    -- A function of the column, not a constant call: the planner would fold that at once.
    CREATE FUNCTION pushd.check_device_token_present(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NOT NULL THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, 'is required (or channel_id, for a broadcast)');
    END $$;

    CREATE TABLE pushd.broadcast_jobs (
        id           bigint PRIMARY KEY,
        app          text NOT NULL,
        channel_id   text NOT NULL,
        payload      text NOT NULL,
        priority     smallint NOT NULL,
        expiration   timestamptz,
        apns_id      uuid,
        dedupe_key   text,
        environment  text,
        run_at       timestamptz NOT NULL DEFAULT now(),
        attempts     integer NOT NULL DEFAULT 0,
        last_error   text,
        created_at   timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX broadcast_jobs_due ON pushd.broadcast_jobs (app, run_at);
    CREATE UNIQUE INDEX broadcast_jobs_dedupe ON pushd.broadcast_jobs (app, dedupe_key, channel_id) WHERE dedupe_key IS NOT NULL;

    ALTER TABLE pushd.jobs
        ALTER COLUMN device_token DROP NOT NULL,
        ADD COLUMN channel_id text,
        ADD CONSTRAINT jobs_channel_id_valid CHECK (pushd.check_channel_id(channel_id, 'pushd.jobs.channel_id', 'jobs_channel_id_valid')),
        -- Rows that stay in pushd.jobs are device-token jobs; channel rows never stay (below).
        ADD CONSTRAINT jobs_device_token_present CHECK (device_token IS NOT NULL
            OR pushd.check_device_token_present(device_token, 'pushd.jobs.device_token', 'jobs_device_token_present')) NOT VALID;
    ALTER TABLE pushd.dead_jobs
        ALTER COLUMN device_token DROP NOT NULL,
        ADD COLUMN channel_id text;

    -- A job with a channel_id is a broadcast: checked here with the same rules as any job,
    -- then moved to pushd.broadcast_jobs; the INSERT into pushd.jobs reports no row for it.
    CREATE FUNCTION pushd.jobs_broadcast_redirect() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.channel_id IS NULL THEN RETURN NEW; END IF;
        IF NEW.device_token IS NOT NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.channel_id', 'jobs_one_target', 'and device_token were both given; a job goes to one device or to one channel');
        END IF;
        -- The column default is alert; a broadcast is always a Live Activity update.
        IF NEW.push_type IS NOT NULL AND NEW.push_type NOT IN ('alert', 'liveactivity') THEN
            PERFORM pushd.fail_check('pushd.jobs.push_type', 'jobs_broadcast_push_type',
                format('must be liveactivity for a broadcast (channel_id given), got %L', NEW.push_type));
        END IF;
        PERFORM pushd.check_app(NEW.app, 'pushd.jobs.app', 'jobs_app_valid');
        PERFORM pushd.check_channel_id(NEW.channel_id, 'pushd.jobs.channel_id', 'jobs_channel_id_valid');
        PERFORM pushd.check_json_object(NEW.payload, 'pushd.jobs.payload', 'jobs_payload_json_object');
        PERFORM pushd.check_payload_size(NEW.payload, 'liveactivity', 'pushd.jobs.payload', 'jobs_payload_size');
        PERFORM pushd.check_payload_shape(NEW.payload, 'liveactivity', 'pushd.jobs.payload', 'jobs_payload_shape');
        PERFORM pushd.check_priority(NEW.priority, 'pushd.jobs.priority', 'jobs_priority_valid');
        PERFORM pushd.check_environment(NEW.environment, 'pushd.jobs.environment', 'jobs_environment_valid');
        IF NEW.payload IS NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.payload', 'jobs_payload_present', 'is required');
        END IF;
        INSERT INTO pushd.broadcast_jobs (id, app, channel_id, payload, priority, expiration, apns_id, dedupe_key,
                                          environment, run_at)
        VALUES (nextval(pg_get_serial_sequence('pushd.jobs', 'id')), NEW.app, NEW.channel_id, NEW.payload,
                coalesce(NEW.priority, 10), NEW.expiration, NEW.apns_id, NEW.dedupe_key, NEW.environment,
                coalesce(NEW.run_at, now()));
        PERFORM pg_notify('pushd_broadcasts', '');
        RETURN NULL;
    END $$;
    -- BEFORE triggers run in name order: this one runs before jobs_normalise.
    CREATE TRIGGER jobs_broadcast_redirect BEFORE INSERT ON pushd.jobs
        FOR EACH ROW EXECUTE FUNCTION pushd.jobs_broadcast_redirect();
    """#

    /// Three NOLOGIN group roles that an administrator grants to login roles:
    /// `pushd_enqueue` for applications (insert jobs, register tokens, fan out to a user;
    /// read nothing), `pushd_daemon` for `pushd run` and the campaign and token commands
    /// (everything but the schema itself), `pushd_readonly` for dashboards (every table but
    /// provider tokens and campaign targets, without device tokens and payloads).
    ///
    /// Roles belong to the cluster, not the database: each is created only if missing, and
    /// a role created meanwhile by a migration of another database is taken as it is. A
    /// migrating user that may not create roles gets a warning naming the statement for
    /// an administrator, and the migration goes on. The grants live in
    /// `pushd.grant_roles()`, which this migration calls and which can be called again (by
    /// the administrator after creating the roles, or by a later migration that adds a
    /// table or replaces `register_token` or `notify_user`).
    ///
    /// `register_token` and `notify_user` become SECURITY DEFINER with a fixed search_path,
    /// so that a role allowed to call them needs no right on `pushd.device_tokens`.
    static let rolesV20 = #"""
    DO $$
    DECLARE
        wanted text;
    BEGIN
        FOREACH wanted IN ARRAY ARRAY['pushd_enqueue', 'pushd_daemon', 'pushd_readonly'] LOOP
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = wanted);
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', wanted);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN
                    NULL;
                WHEN insufficient_privilege THEN
                    RAISE WARNING 'pushd: role % does not exist and % may not create roles; an administrator should run: CREATE ROLE % NOLOGIN; then, in this database: SELECT pushd.grant_roles();',
                        wanted, current_user, wanted;
            END;
        END LOOP;
    END $$;

    CREATE OR REPLACE FUNCTION pushd.grant_roles() RETURNS text[]
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        granted text[] := '{}';
        fn regprocedure;
        tbl text;
        cols text;
    BEGIN
        FOR fn IN SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace = 'pushd'::regnamespace
                    AND p.proname IN ('register_token', 'notify_user', 'create_channel', 'delete_channel', 'jobs_broadcast_redirect') LOOP
            EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', fn);
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
        END LOOP;

        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pushd_enqueue') THEN
            GRANT USAGE ON SCHEMA pushd TO pushd_enqueue;
            GRANT INSERT (app, device_token, payload, push_type, priority, expiration, collapse_id, apns_id,
                          dedupe_key, user_id, environment, run_at, channel_id) ON pushd.jobs TO pushd_enqueue;
            -- The insert trigger looks for sleeping claimers (process ids only) before it notifies.
            GRANT SELECT ON pushd.job_waiters TO pushd_enqueue;
            FOR fn IN SELECT p.oid::regprocedure FROM pg_proc p
                      WHERE p.pronamespace = 'pushd'::regnamespace
                        AND p.proname IN ('register_token', 'notify_user', 'create_channel', 'delete_channel') LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pushd_enqueue', fn);
            END LOOP;
            granted := granted || 'pushd_enqueue'::text;
        END IF;

        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pushd_daemon') THEN
            GRANT USAGE ON SCHEMA pushd TO pushd_daemon;
            GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pushd TO pushd_daemon;
            REVOKE INSERT, UPDATE, DELETE ON pushd.schema_migrations FROM pushd_daemon;
            GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA pushd TO pushd_daemon;
            GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pushd TO pushd_daemon;
            REVOKE EXECUTE ON FUNCTION pushd.grant_roles() FROM pushd_daemon;
            -- Tables added later by the same migrating user are the daemon's too.
            ALTER DEFAULT PRIVILEGES IN SCHEMA pushd GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO pushd_daemon;
            ALTER DEFAULT PRIVILEGES IN SCHEMA pushd GRANT USAGE, SELECT ON SEQUENCES TO pushd_daemon;
            granted := granted || 'pushd_daemon'::text;
        END IF;

        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pushd_readonly') THEN
            GRANT USAGE ON SCHEMA pushd TO pushd_readonly;
            FOREACH tbl IN ARRAY ARRAY['jobs', 'dead_jobs', 'device_tokens', 'campaigns', 'campaign_chunks', 'schema_migrations',
                                       'channels', 'broadcast_jobs', 'instances'] LOOP
                CONTINUE WHEN to_regclass('pushd.' || tbl) IS NULL;
                SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
                FROM pg_attribute
                WHERE attrelid = ('pushd.' || tbl)::regclass AND attnum > 0 AND NOT attisdropped
                  AND attname NOT IN ('device_token', 'token', 'tokens', 'payload', 'payloads');
                EXECUTE format('GRANT SELECT (%s) ON pushd.%I TO pushd_readonly', cols, tbl);
            END LOOP;
            granted := granted || 'pushd_readonly'::text;
        END IF;
        RETURN granted;
    END $$;
    REVOKE EXECUTE ON FUNCTION pushd.grant_roles() FROM PUBLIC;

    SELECT pushd.grant_roles();
    """#

    /// Each `pushd run` upserts its row every few seconds (`InstanceStore`); `pushd status`
    /// and the fleet gauges read it. Rows are tiny and rewritten often, hence the low
    /// fillfactor (HOT updates) and an autovacuum that runs on a few dead rows.
    static let instancesV10 = #"""
    CREATE TABLE pushd.instances (
        id              text PRIMARY KEY,
        host            text NOT NULL,
        pid             integer NOT NULL,
        version         text NOT NULL,
        libcurl_version text NOT NULL,
        apps            text[] NOT NULL,
        paused          jsonb NOT NULL DEFAULT '{}',
        started_at      timestamptz NOT NULL,
        heartbeat_at    timestamptz NOT NULL DEFAULT now()
    ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 100);
    """#

    /// The app-name checks allowed '.' and upper case, which the configuration refuses:
    /// such rows were accepted and could never be sent. Now every check is `AppName`'s
    /// rule. The new checks are NOT VALID so that upgrading does not fail on rows already
    /// stored: those stay (visible per app in `/metrics`) until the operator deletes them.
    static let appNamesV11 = #"""
    CREATE OR REPLACE FUNCTION pushd.check_app(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value ~ '\#(AppName.pattern)' THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('must be \#(AppName.rule.replacing(text: "'", with: "''")), got %L', left(value, 80)));
    END $$;

    ALTER TABLE pushd.jobs DROP CONSTRAINT jobs_app_valid;
    ALTER TABLE pushd.jobs ADD CONSTRAINT jobs_app_valid
        CHECK (app ~ '\#(AppName.pattern)' OR pushd.check_app(app, 'pushd.jobs.app', 'jobs_app_valid')) NOT VALID;
    ALTER TABLE pushd.campaigns DROP CONSTRAINT campaigns_app_valid;
    ALTER TABLE pushd.campaigns ADD CONSTRAINT campaigns_app_valid
        CHECK (app ~ '\#(AppName.pattern)' OR pushd.check_app(app, 'pushd.campaigns.app', 'campaigns_app_valid')) NOT VALID;
    ALTER TABLE pushd.device_tokens DROP CONSTRAINT device_tokens_app_valid;
    ALTER TABLE pushd.device_tokens ADD CONSTRAINT device_tokens_app_valid
        CHECK (app ~ '\#(AppName.pattern)' OR pushd.check_app(app, 'pushd.device_tokens.app', 'device_tokens_app_valid')) NOT VALID;
    """#

    /// Everything a row alone decides is refused at INSERT, with the column and the rule in
    /// the message, instead of being dead-lettered at send: the payload size limit of its
    /// push type, `aps` being an object, duplicate keys (the payload is stored as given, so
    /// `{"a":1,"a":2}` would reach APNs ambiguous), the background rules (priority 5,
    /// `content-available: 1`, nothing the user sees), `badge`, `interruption-level` and
    /// `event` values, the Live Activity and MDM required keys. Rules that need the configuration
    /// (the app, its authentication kind, its topic) stay with the sender. The checks are
    /// NOT VALID: rows already queued are not re-checked (the sender still dead-letters them).
    static let payloadRulesV12 = #"""
    CREATE FUNCTION pushd.check_payload_size(payload text, push_type text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE lim integer := CASE WHEN push_type = 'voip' THEN 5120 ELSE 4096 END;
    BEGIN
        IF payload IS NULL OR octet_length(payload) <= lim THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('is %s bytes; %s payloads may have at most %s', octet_length(payload), push_type, lim));
    END $$;

    -- The path of the first key that appears twice in one object, depth first; NULL when none.
    -- The json type (not jsonb) keeps every member as written, so json_each sees duplicates.
    CREATE FUNCTION pushd.json_duplicate_key(value json, path text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        k text;
        v json;
        seen text[] := '{}';
        found text;
        position integer := 0;
    BEGIN
        CASE json_typeof(value)
        WHEN 'object' THEN
            FOR k, v IN SELECT e.key, e.value FROM json_each(value) AS e LOOP
                IF k = ANY (seen) THEN RETURN path || '.' || k; END IF;
                seen := seen || k;
                IF json_typeof(v) IN ('object', 'array') THEN
                    found := pushd.json_duplicate_key(v, path || '.' || k);
                    IF found IS NOT NULL THEN RETURN found; END IF;
                END IF;
            END LOOP;
        WHEN 'array' THEN
            FOR v IN SELECT e FROM json_array_elements(value) AS e LOOP
                IF json_typeof(v) IN ('object', 'array') THEN
                    found := pushd.json_duplicate_key(v, format('%s[%s]', path, position));
                    IF found IS NOT NULL THEN RETURN found; END IF;
                END IF;
                position := position + 1;
            END LOOP;
        ELSE
            NULL;
        END CASE;
        RETURN NULL;
    END $$;

    -- The cheap inline test of the shape rules, built from C functions only (an inlined SQL
    -- function): a valid payload passes here and never pays for the PL/pgSQL check below.
    -- No duplicate key is proven by counting: every member of a JSON object has exactly one
    -- ':' outside strings, and jsonb keeps one member per key, so when the ':' in the text
    -- are as many as jsonb's members, no key was dropped. A ':' inside a string value only
    -- sends the payload to the exact check. CHECK constraints run in name order, so the
    -- JSON check (`…_json_object`) has refused invalid JSON before the cast here.
    CREATE FUNCTION pushd.payload_shape_ok(payload text, push_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
        SELECT payload IS NULL OR (
            length(payload) - length(replace(payload, ':', ''))
                = jsonb_array_length(jsonb_path_query_array(payload::jsonb, 'strict $.** ? (@.type() == "object").keyvalue()'))
            AND coalesce(jsonb_typeof(payload::jsonb -> 'aps'), 'object') IN ('object', 'null')
            AND (push_type IS DISTINCT FROM 'background'
                 OR (payload::jsonb -> 'aps' ->> 'content-available' = '1'
                     AND NOT (payload::jsonb -> 'aps') ?| ARRAY['alert', 'sound', 'badge']))
            AND coalesce(jsonb_typeof(payload::jsonb -> 'aps' -> 'badge') = 'number' AND payload::jsonb -> 'aps' ->> 'badge' ~ '^[0-9]+$', true)
            AND coalesce(payload::jsonb -> 'aps' ->> 'interruption-level' IN ('passive', 'active', 'time-sensitive', 'critical'), true)
            AND coalesce(payload::jsonb -> 'aps' ->> 'event' IN ('start', 'update', 'end'), true)
            AND (push_type IS DISTINCT FROM 'liveactivity'
                 OR ((payload::jsonb -> 'aps') ?& ARRAY['timestamp', 'event']
                     AND (payload::jsonb -> 'aps' ->> 'event' = 'end' OR (payload::jsonb -> 'aps') ? 'content-state')))
            AND (push_type IS DISTINCT FROM 'mdm' OR jsonb_typeof(payload::jsonb -> 'mdm') = 'string'))
    $$;

    -- The shape rules, raising the first one broken: no duplicate key anywhere, `aps` an
    -- object, and for background pushes `content-available: 1` without alert, sound or badge.
    CREATE FUNCTION pushd.check_payload_shape(payload text, push_type text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        doc json;
        aps json;
        duplicate text;
        field text;
    BEGIN
        IF payload IS NULL THEN RETURN true; END IF;
        doc := payload::json;
        duplicate := pushd.json_duplicate_key(doc, '');
        IF duplicate IS NOT NULL THEN
            RETURN pushd.fail_check(label, constraint_name,
                format('has the key %L twice in one object (at %s); a payload must not repeat a key', regexp_replace(duplicate, '^.*\.', ''), substr(duplicate, 2)));
        END IF;
        IF push_type = 'mdm' AND json_typeof(doc -> 'mdm') IS DISTINCT FROM 'string' THEN
            RETURN pushd.fail_check(label, constraint_name, 'needs the device''s PushMagic string as top-level "mdm" for an mdm push');
        END IF;
        aps := doc -> 'aps';
        IF aps IS NULL OR json_typeof(aps) = 'null' THEN
            IF push_type = 'background' THEN
                RETURN pushd.fail_check(label, constraint_name, 'needs "aps":{"content-available":1} for a background push');
            ELSIF push_type = 'liveactivity' THEN
                RETURN pushd.fail_check(label, constraint_name, 'needs "aps" with "timestamp" and "event" for a liveactivity push');
            END IF;
            RETURN true;
        END IF;
        IF json_typeof(aps) <> 'object' THEN
            RETURN pushd.fail_check(label, constraint_name, format('must have "aps" as a JSON object, got a JSON %s', json_typeof(aps)));
        END IF;
        IF aps -> 'badge' IS NOT NULL AND (json_typeof(aps -> 'badge') <> 'number' OR aps ->> 'badge' !~ '^[0-9]+$') THEN
            RETURN pushd.fail_check(label, constraint_name, format('must have "aps"."badge" as a non-negative integer, got %s', aps -> 'badge'));
        END IF;
        IF aps -> 'interruption-level' IS NOT NULL
           AND coalesce(aps ->> 'interruption-level' NOT IN ('passive', 'active', 'time-sensitive', 'critical'), true) THEN
            RETURN pushd.fail_check(label, constraint_name,
                format('must have "aps"."interruption-level" as one of passive, active, time-sensitive, critical, got %s', aps -> 'interruption-level'));
        END IF;
        IF aps -> 'event' IS NOT NULL AND coalesce(aps ->> 'event' NOT IN ('start', 'update', 'end'), true) THEN
            RETURN pushd.fail_check(label, constraint_name, format('must have "aps"."event" as one of start, update, end, got %s', aps -> 'event'));
        END IF;
        IF push_type = 'liveactivity' THEN
            FOREACH field IN ARRAY ARRAY['timestamp', 'event'] LOOP
                IF aps -> field IS NULL THEN
                    RETURN pushd.fail_check(label, constraint_name, format('needs "aps"."%s" for a liveactivity push', field));
                END IF;
            END LOOP;
            IF aps ->> 'event' <> 'end' AND aps -> 'content-state' IS NULL THEN
                RETURN pushd.fail_check(label, constraint_name, format('needs "aps"."content-state" for a liveactivity %s event', aps ->> 'event'));
            END IF;
        END IF;
        IF push_type = 'background' THEN
            IF coalesce(aps ->> 'content-available', '') <> '1' THEN
                RETURN pushd.fail_check(label, constraint_name, 'needs "content-available":1 in "aps" for a background push');
            END IF;
            FOREACH field IN ARRAY ARRAY['alert', 'sound', 'badge'] LOOP
                IF aps -> field IS NOT NULL THEN
                    RETURN pushd.fail_check(label, constraint_name,
                        format('must not carry "aps"."%s" in a background push (nothing the user sees); send an alert push instead', field));
                END IF;
            END LOOP;
        END IF;
        RETURN true;
    END $$;

    ALTER TABLE pushd.jobs
        ADD CONSTRAINT jobs_payload_size CHECK (octet_length(payload) <= 4096
            OR pushd.check_payload_size(payload, push_type, 'pushd.jobs.payload', 'jobs_payload_size')) NOT VALID,
        ADD CONSTRAINT jobs_payload_shape CHECK (pushd.payload_shape_ok(payload, push_type)
            OR pushd.check_payload_shape(payload, push_type, 'pushd.jobs.payload', 'jobs_payload_shape')) NOT VALID,
        ADD CONSTRAINT jobs_background_priority CHECK (push_type <> 'background' OR priority = 5
            OR pushd.fail_check('pushd.jobs.priority', 'jobs_background_priority',
                                format('must be 5 for a background push (APNs refuses 10 and 1), got %s', priority))) NOT VALID;
    ALTER TABLE pushd.campaigns
        ADD CONSTRAINT campaigns_payload_size CHECK (payload IS NULL OR octet_length(payload) <= 4096
            OR pushd.check_payload_size(payload, push_type, 'pushd.campaigns.payload', 'campaigns_payload_size')) NOT VALID,
        ADD CONSTRAINT campaigns_payload_shape CHECK (pushd.payload_shape_ok(payload, push_type)
            OR pushd.check_payload_shape(payload, push_type, 'pushd.campaigns.payload', 'campaigns_payload_shape')) NOT VALID,
        ADD CONSTRAINT campaigns_background_priority CHECK (push_type <> 'background' OR priority = 5
            OR pushd.fail_check('pushd.campaigns.priority', 'campaigns_background_priority',
                                format('must be 5 for a background push (APNs refuses 10 and 1), got %s', priority))) NOT VALID;

    -- A target's own payload: the shape rules, and the largest size any push type allows
    -- (the campaign's push type is in another row; the sender checks its exact limit).
    CREATE FUNCTION pushd.check_target_payloads(value text[], label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        item text;
        position integer := 0;
    BEGIN
        IF value IS NULL THEN RETURN true; END IF;
        FOREACH item IN ARRAY value LOOP
            position := position + 1;
            CONTINUE WHEN item IS NULL OR (octet_length(item) <= 5120 AND pushd.payload_shape_ok(item, NULL));
            IF octet_length(item) > 5120 THEN
                RETURN pushd.fail_check(format('%s[%s]', label, position), constraint_name,
                    format('is %s bytes; no push type allows more than 5120 (4096 for all but voip)', octet_length(item)));
            END IF;
            PERFORM pushd.check_payload_shape(item, NULL, format('%s[%s]', label, position), constraint_name);
        END LOOP;
        RETURN true;
    END $$;

    ALTER TABLE pushd.campaign_targets ADD CONSTRAINT campaign_targets_payloads_shape
        CHECK (payloads IS NULL OR pushd.check_target_payloads(payloads, 'pushd.campaign_targets.payloads', 'campaign_targets_payloads_shape')) NOT VALID;
    """#

    /// The value types APNs documents for `aps`, as the sender's validator checks them:
    /// strings, 0/1 flags, epoch-second integers, the relevance score, the alert and the
    /// sound dictionaries. The shape functions keep their names and gain these rules, so
    /// everything that calls them by name (target payloads, the broadcast trigger) gets
    /// them too; the two table constraints, which hold the old functions by identity, are
    /// made again on the new ones.
    static let apsValuesV19 = #"""
    ALTER FUNCTION pushd.payload_shape_ok(text, text) RENAME TO payload_shape_v12_ok;
    ALTER FUNCTION pushd.check_payload_shape(text, text, text, text) RENAME TO check_payload_shape_v12;

    -- One jsonpath test of `aps` finds any value of the wrong type; a valid payload is
    -- parsed once more and pays no PL/pgSQL call. Each documented key is looked up by name
    -- (far cheaper than comparing every member against the list); in lax mode a missing key
    -- is an empty sequence and its comparisons are false, and .type() does not unwrap an
    -- array, so ["x"] is not taken for "x". Without `aps` the test finds nothing; `aps` not
    -- an object is refused by the rules above. Live Activities rank by any relevance score;
    -- campaign targets (push type unknown, NULL) are held to its type and the sender
    -- checks the range.
    CREATE FUNCTION pushd.aps_values_ok(payload text, push_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
        SELECT payload IS NULL OR NOT coalesce(jsonb_path_exists(payload::jsonb, '
            lax $.aps ? (
              @."thread-id".type() != "string" || @.category.type() != "string" || @."target-content-id".type() != "string"
           || @."filter-criteria".type() != "string" || @."attributes-type".type() != "string"
           || @."content-available".type() != "number" || (exists(@."content-available") && !(@."content-available" == 0 || @."content-available" == 1))
           || @."mutable-content".type() != "number" || (exists(@."mutable-content") && !(@."mutable-content" == 0 || @."mutable-content" == 1))
           || @."input-push-token".type() != "number" || (exists(@."input-push-token") && !(@."input-push-token" == 0 || @."input-push-token" == 1))
           || @.timestamp.type() != "number" || @.timestamp < 0 || @.timestamp.floor() != @.timestamp
           || @."stale-date".type() != "number" || @."stale-date" < 0 || @."stale-date".floor() != @."stale-date"
           || @."dismissal-date".type() != "number" || @."dismissal-date" < 0 || @."dismissal-date".floor() != @."dismissal-date"
           || @."relevance-score".type() != "number" || ($anyscore == false && (@."relevance-score" < 0 || @."relevance-score" > 1))
           || @."content-state".type() != "object" || @.attributes.type() != "object"
           || (@.alert.type() != "string" && @.alert.type() != "object")
           || @.alert.title.type() != "string" || @.alert.subtitle.type() != "string" || @.alert.body.type() != "string"
           || @.alert."launch-image".type() != "string" || @.alert."title-loc-key".type() != "string"
           || @.alert."subtitle-loc-key".type() != "string" || @.alert."loc-key".type() != "string"
           || @.alert."action-loc-key".type() != "string" || @.alert.action.type() != "string"
           || @.alert."title-loc-args".type() != "array" || exists(@.alert."title-loc-args"[*] ? (@.type() != "string"))
           || @.alert."subtitle-loc-args".type() != "array" || exists(@.alert."subtitle-loc-args"[*] ? (@.type() != "string"))
           || @.alert."loc-args".type() != "array" || exists(@.alert."loc-args"[*] ? (@.type() != "string"))
           || (@.sound.type() != "string" && @.sound.type() != "object")
           || (@.sound.type() == "object" && !exists(@.sound.name))
           || @.sound.name.type() != "string"
           || @.sound.critical.type() != "number" || (exists(@.sound.critical) && !(@.sound.critical == 0 || @.sound.critical == 1))
           || @.sound.volume.type() != "number" || @.sound.volume < 0 || @.sound.volume > 1)'
            , jsonb_build_object('anyscore', push_type IS NULL OR push_type = 'liveactivity'), true), false)
    $$;

    -- The same rules, raising the first value of the wrong type with its path and value.
    CREATE FUNCTION pushd.check_aps_values(payload text, push_type text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        aps json;
        k text;
        v json;
        inner_key text;
        inner_value json;
        position integer;
        path text;
        wanted text;
        got json;
    BEGIN
        IF payload IS NULL THEN RETURN true; END IF;
        aps := payload::json -> 'aps';
        IF aps IS NULL OR json_typeof(aps) <> 'object' THEN RETURN true; END IF;
        FOR k, v IN SELECT e.key, e.value FROM json_each(aps) AS e LOOP
            path := format('"aps"."%s"', k);
            got := v;
            wanted := NULL;
            IF k IN ('thread-id', 'category', 'target-content-id', 'filter-criteria', 'attributes-type') THEN
                IF json_typeof(v) <> 'string' THEN wanted := 'a string'; END IF;
            ELSIF k IN ('content-available', 'mutable-content', 'input-push-token') THEN
                IF json_typeof(v) <> 'number' OR v::text::numeric NOT IN (0, 1) THEN wanted := 'the number 0 or 1'; END IF;
            ELSIF k IN ('timestamp', 'stale-date', 'dismissal-date') THEN
                IF json_typeof(v) <> 'number' OR v::text::numeric < 0 OR v::text::numeric <> trunc(v::text::numeric) THEN
                    wanted := 'a non-negative integer (epoch seconds)';
                END IF;
            ELSIF k = 'relevance-score' THEN
                IF json_typeof(v) <> 'number' THEN
                    wanted := 'a number';
                ELSIF push_type IS DISTINCT FROM 'liveactivity' AND push_type IS NOT NULL AND v::text::numeric NOT BETWEEN 0 AND 1 THEN
                    wanted := 'a number from 0 to 1 (only Live Activities take any number)';
                END IF;
            ELSIF k IN ('content-state', 'attributes') THEN
                IF json_typeof(v) <> 'object' THEN wanted := 'an object'; END IF;
            ELSIF k = 'alert' THEN
                IF json_typeof(v) = 'object' THEN
                    FOR inner_key, inner_value IN SELECT e.key, e.value FROM json_each(v) AS e LOOP
                        path := format('"aps"."alert"."%s"', inner_key);
                        got := inner_value;
                        IF inner_key IN ('title', 'subtitle', 'body', 'launch-image', 'title-loc-key', 'subtitle-loc-key',
                                         'loc-key', 'action-loc-key', 'action') AND json_typeof(inner_value) <> 'string' THEN
                            wanted := 'a string';
                        ELSIF inner_key IN ('title-loc-args', 'subtitle-loc-args', 'loc-args') THEN
                            IF json_typeof(inner_value) <> 'array' THEN
                                wanted := 'an array of strings';
                            ELSE
                                position := 0;
                                FOR got IN SELECT e FROM json_array_elements(inner_value) AS e LOOP
                                    IF json_typeof(got) <> 'string' THEN
                                        path := format('"aps"."alert"."%s"[%s]', inner_key, position);
                                        wanted := 'a string';
                                        EXIT;
                                    END IF;
                                    position := position + 1;
                                END LOOP;
                            END IF;
                        END IF;
                        EXIT WHEN wanted IS NOT NULL;
                    END LOOP;
                ELSIF json_typeof(v) <> 'string' THEN
                    wanted := 'a string or an object';
                END IF;
            ELSIF k = 'sound' THEN
                IF json_typeof(v) = 'object' THEN
                    IF v -> 'name' IS NULL THEN
                        RETURN pushd.fail_check(label, constraint_name,
                            'needs "aps"."sound"."name" when "sound" is an object ("default" for the system sound)');
                    END IF;
                    FOR inner_key, inner_value IN SELECT e.key, e.value FROM json_each(v) AS e LOOP
                        path := format('"aps"."sound"."%s"', inner_key);
                        got := inner_value;
                        IF inner_key = 'name' AND json_typeof(inner_value) <> 'string' THEN
                            wanted := 'a string';
                        ELSIF inner_key = 'critical' AND (json_typeof(inner_value) <> 'number' OR inner_value::text::numeric NOT IN (0, 1)) THEN
                            wanted := 'the number 0 or 1';
                        ELSIF inner_key = 'volume' AND (json_typeof(inner_value) <> 'number' OR inner_value::text::numeric NOT BETWEEN 0 AND 1) THEN
                            wanted := 'a number from 0 to 1';
                        END IF;
                        EXIT WHEN wanted IS NOT NULL;
                    END LOOP;
                ELSIF json_typeof(v) <> 'string' THEN
                    wanted := 'a string or an object with name, critical and volume';
                END IF;
            END IF;
            IF wanted IS NOT NULL THEN
                RETURN pushd.fail_check(label, constraint_name, format('must have %s as %s, got %s', path, wanted, got));
            END IF;
        END LOOP;
        RETURN true;
    END $$;

    CREATE FUNCTION pushd.payload_shape_ok(payload text, push_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
        SELECT pushd.payload_shape_v12_ok(payload, push_type) AND pushd.aps_values_ok(payload, push_type)
    $$;

    CREATE FUNCTION pushd.check_payload_shape(payload text, push_type text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        RETURN pushd.check_payload_shape_v12(payload, push_type, label, constraint_name)
           AND pushd.check_aps_values(payload, push_type, label, constraint_name);
    END $$;

    ALTER TABLE pushd.jobs
        DROP CONSTRAINT jobs_payload_shape,
        ADD CONSTRAINT jobs_payload_shape CHECK (pushd.payload_shape_ok(payload, push_type)
            OR pushd.check_payload_shape(payload, push_type, 'pushd.jobs.payload', 'jobs_payload_shape')) NOT VALID;
    ALTER TABLE pushd.campaigns
        DROP CONSTRAINT campaigns_payload_shape,
        ADD CONSTRAINT campaigns_payload_shape CHECK (pushd.payload_shape_ok(payload, push_type)
            OR pushd.check_payload_shape(payload, push_type, 'pushd.campaigns.payload', 'campaigns_payload_shape')) NOT VALID;
    """#

    /// Broadcast jobs had no `first_attempt_at`: their retry windows and the outage budget
    /// counted from `created_at`, so a broadcast scheduled with `run_at` further ahead than
    /// `retry.outage_limit_s` was dead-lettered at its first 500 or 503. The column is set on
    /// the first retry, as on `pushd.jobs`, and kept in `pushd.dead_jobs`. `grant_roles()`
    /// runs again so that `pushd_readonly` may read the new column.
    static let broadcastFirstAttemptV21 = #"""
    ALTER TABLE pushd.broadcast_jobs ADD COLUMN first_attempt_at timestamptz;

    SELECT pushd.grant_roles();
    """#
    /// Rules from Apple's documentation that the row alone can show, refused at insert with
    /// the column named, as the sender would refuse them later (`NotificationValidator`):
    /// - ActivityKit's alert `title` and `body` may be localized objects (`loc-key`,
    ///   `loc-args`), and `input-push-channel` (start a Live Activity on a broadcast channel)
    ///   is a string. The V19 functions are replaced with these rules added; campaign targets
    ///   (push type unknown, NULL) get the Live Activity forms, the sender checks the type.
    /// - `apns-collapse-id` is a header value: no control characters (CR or LF would split
    ///   the header line; APNs answers BadCollapseId).
    /// - `apns-expiration` is epoch seconds, 0 or more: nothing before 1970.
    static let appleRulesV22 = #"""
    CREATE OR REPLACE FUNCTION pushd.aps_values_ok(payload text, push_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
        SELECT payload IS NULL OR NOT coalesce(jsonb_path_exists(payload::jsonb, '
            lax $.aps ? (
              @."thread-id".type() != "string" || @.category.type() != "string" || @."target-content-id".type() != "string"
           || @."input-push-channel".type() != "string"
           || @."filter-criteria".type() != "string" || @."attributes-type".type() != "string"
           || @."content-available".type() != "number" || (exists(@."content-available") && !(@."content-available" == 0 || @."content-available" == 1))
           || @."mutable-content".type() != "number" || (exists(@."mutable-content") && !(@."mutable-content" == 0 || @."mutable-content" == 1))
           || @."input-push-token".type() != "number" || (exists(@."input-push-token") && !(@."input-push-token" == 0 || @."input-push-token" == 1))
           || @.timestamp.type() != "number" || @.timestamp < 0 || @.timestamp.floor() != @.timestamp
           || @."stale-date".type() != "number" || @."stale-date" < 0 || @."stale-date".floor() != @."stale-date"
           || @."dismissal-date".type() != "number" || @."dismissal-date" < 0 || @."dismissal-date".floor() != @."dismissal-date"
           || @."relevance-score".type() != "number" || ($anyscore == false && (@."relevance-score" < 0 || @."relevance-score" > 1))
           || @."content-state".type() != "object" || @.attributes.type() != "object"
           || (@.alert.type() != "string" && @.alert.type() != "object")
           || ($localized == false && (@.alert.title.type() != "string" || @.alert.body.type() != "string"))
           || ($localized == true && (
                 (@.alert.title.type() != "string" && @.alert.title.type() != "object")
              || (@.alert.title.type() == "object" && !exists(@.alert.title."loc-key"))
              || @.alert.title."loc-key".type() != "string"
              || @.alert.title."loc-args".type() != "array" || exists(@.alert.title."loc-args"[*] ? (@.type() != "string"))
              || (@.alert.body.type() != "string" && @.alert.body.type() != "object")
              || (@.alert.body.type() == "object" && !exists(@.alert.body."loc-key"))
              || @.alert.body."loc-key".type() != "string"
              || @.alert.body."loc-args".type() != "array" || exists(@.alert.body."loc-args"[*] ? (@.type() != "string"))))
           || @.alert.subtitle.type() != "string"
           || @.alert."launch-image".type() != "string" || @.alert."title-loc-key".type() != "string"
           || @.alert."subtitle-loc-key".type() != "string" || @.alert."loc-key".type() != "string"
           || @.alert."action-loc-key".type() != "string" || @.alert.action.type() != "string"
           || @.alert."title-loc-args".type() != "array" || exists(@.alert."title-loc-args"[*] ? (@.type() != "string"))
           || @.alert."subtitle-loc-args".type() != "array" || exists(@.alert."subtitle-loc-args"[*] ? (@.type() != "string"))
           || @.alert."loc-args".type() != "array" || exists(@.alert."loc-args"[*] ? (@.type() != "string"))
           || (@.sound.type() != "string" && @.sound.type() != "object")
           || (@.sound.type() == "object" && !exists(@.sound.name))
           || @.sound.name.type() != "string"
           || @.sound.critical.type() != "number" || (exists(@.sound.critical) && !(@.sound.critical == 0 || @.sound.critical == 1))
           || @.sound.volume.type() != "number" || @.sound.volume < 0 || @.sound.volume > 1)'
            , jsonb_build_object('anyscore', push_type IS NULL OR push_type = 'liveactivity',
                                 'localized', push_type IS NULL OR push_type = 'liveactivity'), true), false)
    $$;

    -- The same rules, raising the first value of the wrong type with its path and value.
    CREATE OR REPLACE FUNCTION pushd.check_aps_values(payload text, push_type text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        aps json;
        k text;
        v json;
        inner_key text;
        inner_value json;
        position integer;
        path text;
        wanted text;
        got json;
        localized_text constant text := 'a string or an object with a string "loc-key" and "loc-args" an array of strings';
    BEGIN
        IF payload IS NULL THEN RETURN true; END IF;
        aps := payload::json -> 'aps';
        IF aps IS NULL OR json_typeof(aps) <> 'object' THEN RETURN true; END IF;
        FOR k, v IN SELECT e.key, e.value FROM json_each(aps) AS e LOOP
            path := format('"aps"."%s"', k);
            got := v;
            wanted := NULL;
            IF k IN ('thread-id', 'category', 'target-content-id', 'filter-criteria', 'attributes-type', 'input-push-channel') THEN
                IF json_typeof(v) <> 'string' THEN wanted := 'a string'; END IF;
            ELSIF k IN ('content-available', 'mutable-content', 'input-push-token') THEN
                IF json_typeof(v) <> 'number' OR v::text::numeric NOT IN (0, 1) THEN wanted := 'the number 0 or 1'; END IF;
            ELSIF k IN ('timestamp', 'stale-date', 'dismissal-date') THEN
                IF json_typeof(v) <> 'number' OR v::text::numeric < 0 OR v::text::numeric <> trunc(v::text::numeric) THEN
                    wanted := 'a non-negative integer (epoch seconds)';
                END IF;
            ELSIF k = 'relevance-score' THEN
                IF json_typeof(v) <> 'number' THEN
                    wanted := 'a number';
                ELSIF push_type IS DISTINCT FROM 'liveactivity' AND push_type IS NOT NULL AND v::text::numeric NOT BETWEEN 0 AND 1 THEN
                    wanted := 'a number from 0 to 1 (only Live Activities take any number)';
                END IF;
            ELSIF k IN ('content-state', 'attributes') THEN
                IF json_typeof(v) <> 'object' THEN wanted := 'an object'; END IF;
            ELSIF k = 'alert' THEN
                IF json_typeof(v) = 'object' THEN
                    FOR inner_key, inner_value IN SELECT e.key, e.value FROM json_each(v) AS e LOOP
                        path := format('"aps"."alert"."%s"', inner_key);
                        got := inner_value;
                        IF inner_key IN ('title', 'body') AND (push_type IS NULL OR push_type = 'liveactivity') THEN
                            IF json_typeof(inner_value) = 'string' THEN
                                NULL;
                            ELSIF json_typeof(inner_value) <> 'object' OR json_typeof(inner_value -> 'loc-key') IS DISTINCT FROM 'string' THEN
                                wanted := localized_text;
                            ELSIF inner_value -> 'loc-args' IS NOT NULL THEN
                                IF json_typeof(inner_value -> 'loc-args') <> 'array' THEN
                                    wanted := localized_text;
                                ELSIF EXISTS (SELECT 1 FROM json_array_elements(inner_value -> 'loc-args') AS e WHERE json_typeof(e) <> 'string') THEN
                                    wanted := localized_text;
                                END IF;
                            END IF;
                        ELSIF inner_key IN ('title', 'subtitle', 'body', 'launch-image', 'title-loc-key', 'subtitle-loc-key',
                                         'loc-key', 'action-loc-key', 'action') AND json_typeof(inner_value) <> 'string' THEN
                            wanted := 'a string';
                        ELSIF inner_key IN ('title-loc-args', 'subtitle-loc-args', 'loc-args') THEN
                            IF json_typeof(inner_value) <> 'array' THEN
                                wanted := 'an array of strings';
                            ELSE
                                position := 0;
                                FOR got IN SELECT e FROM json_array_elements(inner_value) AS e LOOP
                                    IF json_typeof(got) <> 'string' THEN
                                        path := format('"aps"."alert"."%s"[%s]', inner_key, position);
                                        wanted := 'a string';
                                        EXIT;
                                    END IF;
                                    position := position + 1;
                                END LOOP;
                            END IF;
                        END IF;
                        EXIT WHEN wanted IS NOT NULL;
                    END LOOP;
                ELSIF json_typeof(v) <> 'string' THEN
                    wanted := 'a string or an object';
                END IF;
            ELSIF k = 'sound' THEN
                IF json_typeof(v) = 'object' THEN
                    IF v -> 'name' IS NULL THEN
                        RETURN pushd.fail_check(label, constraint_name,
                            'needs "aps"."sound"."name" when "sound" is an object ("default" for the system sound)');
                    END IF;
                    FOR inner_key, inner_value IN SELECT e.key, e.value FROM json_each(v) AS e LOOP
                        path := format('"aps"."sound"."%s"', inner_key);
                        got := inner_value;
                        IF inner_key = 'name' AND json_typeof(inner_value) <> 'string' THEN
                            wanted := 'a string';
                        ELSIF inner_key = 'critical' AND (json_typeof(inner_value) <> 'number' OR inner_value::text::numeric NOT IN (0, 1)) THEN
                            wanted := 'the number 0 or 1';
                        ELSIF inner_key = 'volume' AND (json_typeof(inner_value) <> 'number' OR inner_value::text::numeric NOT BETWEEN 0 AND 1) THEN
                            wanted := 'a number from 0 to 1';
                        END IF;
                        EXIT WHEN wanted IS NOT NULL;
                    END LOOP;
                ELSIF json_typeof(v) <> 'string' THEN
                    wanted := 'a string or an object with name, critical and volume';
                END IF;
            END IF;
            IF wanted IS NOT NULL THEN
                RETURN pushd.fail_check(label, constraint_name, format('must have %s as %s, got %s', path, wanted, got));
            END IF;
        END LOOP;
        RETURN true;
    END $$;

    CREATE FUNCTION pushd.check_collapse_id_printable(value text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        position integer;
    BEGIN
        IF value IS NULL OR value !~ '[\x01-\x1f\x7f]' THEN RETURN true; END IF;
        position := length(substring(value from '^[^\x01-\x1f\x7f]*')) + 1;
        RETURN pushd.fail_check(label, constraint_name, format(
            'must not contain control characters (APNs refuses them), found U+%s at position %s',
            lpad(upper(to_hex(ascii(substr(value, position, 1)))), 4, '0'), position));
    END $$;

    CREATE FUNCTION pushd.check_expiration(value timestamptz, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR value >= timestamptz '1970-01-01 00:00:00+00' THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name, format(
            'must not be before 1970-01-01 00:00:00 UTC (APNs takes epoch seconds, 0 or more), got %s',
            to_char(value AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')));
    END $$;

    ALTER TABLE pushd.jobs
        ADD CONSTRAINT jobs_collapse_id_printable CHECK (collapse_id IS NULL OR collapse_id !~ '[\x01-\x1f\x7f]'
            OR pushd.check_collapse_id_printable(collapse_id, 'pushd.jobs.collapse_id', 'jobs_collapse_id_printable')) NOT VALID,
        ADD CONSTRAINT jobs_expiration_valid CHECK (expiration IS NULL OR expiration >= timestamptz '1970-01-01 00:00:00+00'
            OR pushd.check_expiration(expiration, 'pushd.jobs.expiration', 'jobs_expiration_valid')) NOT VALID;
    ALTER TABLE pushd.campaigns
        ADD CONSTRAINT campaigns_collapse_id_printable CHECK (collapse_id IS NULL OR collapse_id !~ '[\x01-\x1f\x7f]'
            OR pushd.check_collapse_id_printable(collapse_id, 'pushd.campaigns.collapse_id', 'campaigns_collapse_id_printable')) NOT VALID,
        ADD CONSTRAINT campaigns_expiration_valid CHECK (expiration IS NULL OR expiration >= timestamptz '1970-01-01 00:00:00+00'
            OR pushd.check_expiration(expiration, 'pushd.campaigns.expiration', 'campaigns_expiration_valid')) NOT VALID;
    ALTER TABLE pushd.broadcast_jobs
        ADD CONSTRAINT broadcast_jobs_expiration_valid CHECK (expiration IS NULL OR expiration >= timestamptz '1970-01-01 00:00:00+00'
            OR pushd.check_expiration(expiration, 'pushd.broadcast_jobs.expiration', 'broadcast_jobs_expiration_valid')) NOT VALID;
    """#

    /// App name → the lanes APNs takes none of its notifications on, and the error, as each
    /// instance last saw it: `pushd status` names them.
    static let instanceOutagesV23 = #"""
    ALTER TABLE pushd.instances ADD COLUMN apns_unavailable jsonb NOT NULL DEFAULT '{}';

    SELECT pushd.grant_roles();
    """#

    /// A broadcast is inserted into `pushd.jobs` and moved to `pushd.broadcast_jobs` by a
    /// trigger: every rule is checked there first, so that a refusal names the table the
    /// application wrote (`pushd.jobs.expiration`, `pushd.jobs.app`), not the one it never saw.
    /// Replacing the function resets its SECURITY DEFINER, which `grant_roles` sets again.
    static let broadcastRedirectChecksV24 = #"""
    CREATE OR REPLACE FUNCTION pushd.jobs_broadcast_redirect() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.channel_id IS NULL THEN RETURN NEW; END IF;
        IF NEW.device_token IS NOT NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.channel_id', 'jobs_one_target', 'and device_token were both given; a job goes to one device or to one channel');
        END IF;
        -- The column default is alert; a broadcast is always a Live Activity update.
        IF NEW.push_type IS NOT NULL AND NEW.push_type NOT IN ('alert', 'liveactivity') THEN
            PERFORM pushd.fail_check('pushd.jobs.push_type', 'jobs_broadcast_push_type',
                format('must be liveactivity for a broadcast (channel_id given), got %L', NEW.push_type));
        END IF;
        IF NEW.app IS NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.app', 'jobs_app_present', 'is required');
        END IF;
        PERFORM pushd.check_app(NEW.app, 'pushd.jobs.app', 'jobs_app_valid');
        PERFORM pushd.check_channel_id(NEW.channel_id, 'pushd.jobs.channel_id', 'jobs_channel_id_valid');
        PERFORM pushd.check_json_object(NEW.payload, 'pushd.jobs.payload', 'jobs_payload_json_object');
        PERFORM pushd.check_payload_size(NEW.payload, 'liveactivity', 'pushd.jobs.payload', 'jobs_payload_size');
        PERFORM pushd.check_payload_shape(NEW.payload, 'liveactivity', 'pushd.jobs.payload', 'jobs_payload_shape');
        PERFORM pushd.check_priority(NEW.priority, 'pushd.jobs.priority', 'jobs_priority_valid');
        PERFORM pushd.check_environment(NEW.environment, 'pushd.jobs.environment', 'jobs_environment_valid');
        PERFORM pushd.check_expiration(NEW.expiration, 'pushd.jobs.expiration', 'jobs_expiration_valid');
        IF NEW.payload IS NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.payload', 'jobs_payload_present', 'is required');
        END IF;
        INSERT INTO pushd.broadcast_jobs (id, app, channel_id, payload, priority, expiration, apns_id, dedupe_key,
                                          environment, run_at)
        VALUES (nextval(pg_get_serial_sequence('pushd.jobs', 'id')), NEW.app, NEW.channel_id, NEW.payload,
                coalesce(NEW.priority, 10), NEW.expiration, NEW.apns_id, NEW.dedupe_key, NEW.environment,
                coalesce(NEW.run_at, now()));
        PERFORM pg_notify('pushd_broadcasts', '');
        RETURN NULL;
    END $$;

    SELECT pushd.grant_roles();
    """#

    /// A CHECK constraint's expression is planned again for every statement that writes the
    /// table: the SQL function `payload_shape_ok` was inlined, its jsonpath literals parsed and
    /// its constants folded on every INSERT, about 2 ms of a one-row INSERT's 2.5 ms (500
    /// one-row INSERTs: 2.0–2.7 ms each, 0.4–0.5 ms without that constraint; one 500-row
    /// INSERT: 0.12 ms a row). As PL/pgSQL the same expression is planned once per session and
    /// its plan kept (0.6–0.9 ms a one-row INSERT). `CREATE OR REPLACE` keeps the function's
    /// identity, so the constraints on jobs and campaigns and the target payload check use it
    /// as they are; the rules and the error messages (`check_payload_shape`) do not change.
    static let shapePlannedOnceV25 = #"""
    CREATE OR REPLACE FUNCTION pushd.payload_shape_ok(payload text, push_type text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        RETURN pushd.payload_shape_v12_ok(payload, push_type) AND pushd.aps_values_ok(payload, push_type);
    END $$;
    """#

    /// A claimed broadcast job or channel request only had its `run_at` moved to the end of its
    /// lease, so a statement making waiting rows due (`HeldWork.release`, `BroadcastQueue.makeDue`)
    /// could not tell a row being sent from one waiting, and made it due again while it was in
    /// flight: another instance could send it a second time. Claims now set `leased_until` too,
    /// putting a row back for a retry clears it, and those statements leave rows whose lease
    /// has not ended alone.
    static let broadcastLeasesV26 = #"""
    ALTER TABLE pushd.broadcast_jobs ADD COLUMN leased_until timestamptz;
    ALTER TABLE pushd.channels ADD COLUMN leased_until timestamptz;

    SELECT pushd.grant_roles();
    """#

    /// "app/environment" for every environment an instance has credentials for (a certificate
    /// app has one per certificate): an instance without a certificate for an environment
    /// leaves that environment's work to one that advertises it. NULL is an instance of an
    /// earlier version, which claims every environment of its apps as before.
    static let instanceEnvironmentsV27 = #"""
    ALTER TABLE pushd.instances ADD COLUMN environments text[];

    SELECT pushd.grant_roles();
    """#

    /// `jobs_dedupe` held a key only while its job was in `pushd.jobs`: jobs are sent
    /// milliseconds after COMMIT and the claim deletes them, so a client retrying its request a
    /// second later inserted the push again; and a retry arriving while the first job sat in an
    /// open claim batch waited on that batch's transaction (up to the answer deadline) in the
    /// unique check. Keys now go to a ledger, taken by a BEFORE INSERT trigger with
    /// `ON CONFLICT DO NOTHING`: a taken key skips the row (the INSERT reports 0 rows, with or
    /// without ON CONFLICT), and a concurrent duplicate waits only for the other INSERT's own
    /// transaction, since a ledger row is never touched by a claim. A row pushd puts back for a
    /// retry carries the id that took the key and goes through. `DedupeLedger.sweep` deletes
    /// keys past the retention whose job is no longer queued, so a queued job's key is never
    /// freed under it. `jobs_dedupe` stays, as the arbiter `ON CONFLICT (app, dedupe_key,
    /// device_token) WHERE dedupe_key IS NOT NULL` names. The trigger is named to fire after
    /// `jobs_normalise` (triggers of an event fire in name order) and after
    /// `jobs_broadcast_redirect`, whose broadcasts never reach it. The keys of jobs queued now
    /// are copied while the trigger's lock keeps inserts and claims out; an instance of the
    /// previous version keeps working: its claim and its retry INSERT are unchanged.
    static let dedupeLedgerV28 = #"""
    CREATE TABLE pushd.job_dedupe_keys (
        app          text NOT NULL,
        dedupe_key   text NOT NULL,
        device_token text NOT NULL,
        job_id       bigint NOT NULL,
        created_at   timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (app, dedupe_key, device_token)
    ) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
    CREATE INDEX job_dedupe_keys_created_at ON pushd.job_dedupe_keys (created_at);

    CREATE FUNCTION pushd.jobs_take_dedupe_key() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        IF NEW.dedupe_key IS NULL THEN RETURN NEW; END IF;
        INSERT INTO pushd.job_dedupe_keys (app, dedupe_key, device_token, job_id)
        VALUES (NEW.app, NEW.dedupe_key, lower(NEW.device_token), NEW.id)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN RETURN NEW; END IF;
        -- Taken: by this very job when pushd puts it back for a retry, else by an earlier one.
        IF EXISTS (SELECT 1 FROM pushd.job_dedupe_keys k
                   WHERE k.app = NEW.app AND k.dedupe_key = NEW.dedupe_key
                     AND k.device_token = lower(NEW.device_token) AND k.job_id = NEW.id) THEN
            RETURN NEW;
        END IF;
        RETURN NULL;
    END $$;
    REVOKE EXECUTE ON FUNCTION pushd.jobs_take_dedupe_key() FROM PUBLIC;

    LOCK TABLE pushd.jobs IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO pushd.job_dedupe_keys (app, dedupe_key, device_token, job_id, created_at)
    SELECT app, dedupe_key, device_token, id, created_at FROM pushd.jobs WHERE dedupe_key IS NOT NULL
    ON CONFLICT DO NOTHING;
    -- Rows without a key (most of them) pay no PL/pgSQL call.
    CREATE TRIGGER jobs_take_dedupe_key BEFORE INSERT ON pushd.jobs
        FOR EACH ROW WHEN (NEW.dedupe_key IS NOT NULL) EXECUTE FUNCTION pushd.jobs_take_dedupe_key();

    SELECT pushd.grant_roles();
    """#

    /// Rules Apple states per push type that the row shows: PushToTalk pushes take priority
    /// 10 and expiration 0 (the PushToTalk framework's "Receive audio"), Live Activity pushes
    /// and broadcasts priority 10 or 5 (ActivityKit), a broadcast cannot start a Live Activity
    /// (ActivityKit), and a channel created with storage policy none takes only expiration 0
    /// ("Sending broadcast push notification requests to APNs"), whose payloads may have 5120
    /// bytes. NOT VALID: rows queued before are dead-lettered at claim with the same reasons.
    static let pushTypeRulesV29 = #"""
    ALTER TABLE pushd.jobs
        ADD CONSTRAINT jobs_liveactivity_priority CHECK (push_type <> 'liveactivity' OR priority IN (10, 5)
            OR pushd.fail_check('pushd.jobs.priority', 'jobs_liveactivity_priority',
                                format('must be 10 or 5 for a liveactivity push (ActivityKit takes no other), got %s', priority))) NOT VALID,
        ADD CONSTRAINT jobs_pushtotalk_priority CHECK (push_type <> 'pushtotalk' OR priority = 10
            OR pushd.fail_check('pushd.jobs.priority', 'jobs_pushtotalk_priority',
                                format('must be 10 for a pushtotalk push (Apple: priority 10, expiration 0), got %s', priority))) NOT VALID,
        ADD CONSTRAINT jobs_pushtotalk_expiration CHECK (push_type <> 'pushtotalk' OR expiration IS NULL
            OR expiration < timestamptz '1970-01-01 00:00:01+00'
            OR pushd.fail_check('pushd.jobs.expiration', 'jobs_pushtotalk_expiration',
                                format('must be NULL or 1970-01-01 00:00:00 UTC (apns-expiration 0) for a pushtotalk push, got %s',
                                       to_char(expiration AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')))) NOT VALID;
    ALTER TABLE pushd.campaigns
        ADD CONSTRAINT campaigns_liveactivity_priority CHECK (push_type <> 'liveactivity' OR priority IN (10, 5)
            OR pushd.fail_check('pushd.campaigns.priority', 'campaigns_liveactivity_priority',
                                format('must be 10 or 5 for a liveactivity push (ActivityKit takes no other), got %s', priority))) NOT VALID,
        ADD CONSTRAINT campaigns_pushtotalk_priority CHECK (push_type <> 'pushtotalk' OR priority = 10
            OR pushd.fail_check('pushd.campaigns.priority', 'campaigns_pushtotalk_priority',
                                format('must be 10 for a pushtotalk push (Apple: priority 10, expiration 0), got %s', priority))) NOT VALID,
        ADD CONSTRAINT campaigns_pushtotalk_expiration CHECK (push_type <> 'pushtotalk' OR expiration IS NULL
            OR expiration < timestamptz '1970-01-01 00:00:01+00'
            OR pushd.fail_check('pushd.campaigns.expiration', 'campaigns_pushtotalk_expiration',
                                format('must be NULL or 1970-01-01 00:00:00 UTC (apns-expiration 0) for a pushtotalk push, got %s',
                                       to_char(expiration AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')))) NOT VALID;

    -- Broadcasts are written to pushd.jobs and moved here by jobs_broadcast_redirect; the
    -- refusals name the columns the application wrote.
    CREATE FUNCTION pushd.broadcast_apple_rules() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        IF NEW.priority NOT IN (10, 5) THEN
            PERFORM pushd.fail_check('pushd.jobs.priority', 'jobs_broadcast_priority',
                format('must be 10 or 5 for a broadcast (ActivityKit takes no other), got %s', NEW.priority));
        END IF;
        IF NEW.expiration >= timestamptz '1970-01-01 00:00:01+00' AND EXISTS (
            SELECT 1 FROM pushd.channels c
            WHERE c.app = NEW.app AND c.channel_id = NEW.channel_id AND c.storage_policy = 'none') THEN
            PERFORM pushd.fail_check('pushd.jobs.expiration', 'jobs_broadcast_expiration',
                format('must be NULL or 1970-01-01 00:00:00 UTC (apns-expiration 0): channel %s was created with storage policy none, which APNs gives no other expiration; got %s',
                       NEW.channel_id, to_char(NEW.expiration AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')));
        END IF;
        IF json_typeof(NEW.payload::json -> 'aps') = 'object' AND (NEW.payload::json -> 'aps' ->> 'event') = 'start' THEN
            PERFORM pushd.fail_check('pushd.jobs.payload', 'jobs_broadcast_start',
                'must not have "aps"."event" "start": a broadcast cannot start a Live Activity (send the start to a push-to-start token, with "input-push-channel")');
        END IF;
        RETURN NEW;
    END $$;
    REVOKE EXECUTE ON FUNCTION pushd.broadcast_apple_rules() FROM PUBLIC;
    CREATE TRIGGER broadcast_apple_rules BEFORE INSERT ON pushd.broadcast_jobs
        FOR EACH ROW EXECUTE FUNCTION pushd.broadcast_apple_rules();

    -- A broadcast payload may have 5120 bytes ("Sending broadcast push notification requests
    -- to APNs"), a Live Activity push to one device 4096.
    CREATE OR REPLACE FUNCTION pushd.check_payload_size(payload text, push_type text, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE lim integer := CASE WHEN push_type IN ('voip', 'broadcast') THEN 5120 ELSE 4096 END;
    BEGIN
        IF payload IS NULL OR octet_length(payload) <= lim THEN RETURN true; END IF;
        RETURN pushd.fail_check(label, constraint_name,
            format('is %s bytes; %s payloads may have at most %s', octet_length(payload), push_type, lim));
    END $$;

    CREATE OR REPLACE FUNCTION pushd.jobs_broadcast_redirect() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.channel_id IS NULL THEN RETURN NEW; END IF;
        IF NEW.device_token IS NOT NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.channel_id', 'jobs_one_target', 'and device_token were both given; a job goes to one device or to one channel');
        END IF;
        -- The column default is alert; a broadcast is always a Live Activity update.
        IF NEW.push_type IS NOT NULL AND NEW.push_type NOT IN ('alert', 'liveactivity') THEN
            PERFORM pushd.fail_check('pushd.jobs.push_type', 'jobs_broadcast_push_type',
                format('must be liveactivity for a broadcast (channel_id given), got %L', NEW.push_type));
        END IF;
        IF NEW.app IS NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.app', 'jobs_app_present', 'is required');
        END IF;
        PERFORM pushd.check_app(NEW.app, 'pushd.jobs.app', 'jobs_app_valid');
        PERFORM pushd.check_channel_id(NEW.channel_id, 'pushd.jobs.channel_id', 'jobs_channel_id_valid');
        PERFORM pushd.check_json_object(NEW.payload, 'pushd.jobs.payload', 'jobs_payload_json_object');
        PERFORM pushd.check_payload_size(NEW.payload, 'broadcast', 'pushd.jobs.payload', 'jobs_payload_size');
        PERFORM pushd.check_payload_shape(NEW.payload, 'liveactivity', 'pushd.jobs.payload', 'jobs_payload_shape');
        PERFORM pushd.check_priority(NEW.priority, 'pushd.jobs.priority', 'jobs_priority_valid');
        PERFORM pushd.check_environment(NEW.environment, 'pushd.jobs.environment', 'jobs_environment_valid');
        PERFORM pushd.check_expiration(NEW.expiration, 'pushd.jobs.expiration', 'jobs_expiration_valid');
        IF NEW.payload IS NULL THEN
            PERFORM pushd.fail_check('pushd.jobs.payload', 'jobs_payload_present', 'is required');
        END IF;
        INSERT INTO pushd.broadcast_jobs (id, app, channel_id, payload, priority, expiration, apns_id, dedupe_key,
                                          environment, run_at)
        VALUES (nextval(pg_get_serial_sequence('pushd.jobs', 'id')), NEW.app, NEW.channel_id, NEW.payload,
                coalesce(NEW.priority, 10), NEW.expiration, NEW.apns_id, NEW.dedupe_key, NEW.environment,
                coalesce(NEW.run_at, now()));
        PERFORM pg_notify('pushd_broadcasts', '');
        RETURN NULL;
    END $$;


    SELECT pushd.grant_roles();
    """#
}
