-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Write journal rows (parallel arrays, one element per row, in order) unless a final
-- (completed or failed) row holds the key: a 'retrying' row is replaced, a final one
-- wins. NULL completed_at means now. Returns the keys written. Every journal write
-- goes through it (the general transition path, signals, child results) but the
-- fast transition path in queries.sql, which holds the same statement inline because
-- the function call measured about 8% of W1 there.
CREATE OR REPLACE FUNCTION write_steps(
    p_run_id text, p_keys text[], p_kinds text[], p_statuses text[], p_outputs text[],
    p_errors text[], p_attempts integer[], p_started timestamptz[], p_completed timestamptz[]
) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_written text[];
BEGIN
    WITH up AS (
        INSERT INTO steps AS s (run_id, key, kind, status, output, error, attempts,
                                started_at, completed_at, recorded_at)
        SELECT p_run_id, u.key, u.kind, u.status, u.output::json, u.error::jsonb, u.attempts,
               u.started_at, coalesce(u.completed_at, perdure_now()), perdure_now()
        FROM unnest(p_keys, p_kinds, p_statuses, p_outputs, p_errors, p_attempts, p_started,
                    p_completed) WITH ORDINALITY
             AS u(key, kind, status, output, error, attempts, started_at, completed_at, ord)
        ORDER BY u.ord
        ON CONFLICT (run_id, key) DO UPDATE SET
            seq = excluded.seq, kind = excluded.kind, status = excluded.status,
            output = excluded.output, error = excluded.error, attempts = excluded.attempts,
            started_at = excluded.started_at, completed_at = excluded.completed_at,
            recorded_at = excluded.recorded_at
        WHERE s.status = 'retrying'
        RETURNING s.key
    )
    SELECT coalesce(array_agg(up.key), '{}') INTO v_written FROM up;
    RETURN v_written;
END
$$;
