extension Migrator {
    /// A campaign imported from registered tokens was grouped into chunks by token alone, so
    /// nearly every chunk mixed production and sandbox tokens. During an outage of one
    /// environment such a chunk cannot stop and wait with its unsent targets (the other
    /// environment's targets after them may still go), so it set its down targets aside one
    /// parked row each, and an outage wrote most of the campaign into the parked table.
    /// Grouped by environment, then token, every chunk but the one where the environments meet
    /// goes to one environment, and stops and waits as a file import's chunk does.
    static let environmentChunksV34 = #"""
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
            SELECT m.token, m.environment, (row_number() OVER (ORDER BY m.environment, m.token) - 1) / p_chunk_size AS n
            FROM matching m
            WHERE NOT EXISTS (SELECT 1 FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens) AS e(token)
                              WHERE t.campaign_id = p_campaign_id AND e.token = m.token)
        ), ins AS (
            INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, environments)
            SELECT p_campaign_id, first_chunk + n::integer, array_agg(token ORDER BY environment, token),
               array_agg(environment ORDER BY environment, token)
            FROM src GROUP BY n
            RETURNING chunk, cardinality(tokens) AS size
        ), chunk_rows AS (
            INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size)
            SELECT p_campaign_id, chunk, size FROM ins
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
    """#
}
