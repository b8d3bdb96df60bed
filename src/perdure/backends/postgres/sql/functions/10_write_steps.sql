-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Write journal rows (parallel arrays, one element per row, in order) unless a final
-- (completed or failed) row holds the key: a 'retrying' row is replaced, a final one
-- wins. NULL completed_at means now. Returns the keys written. Every journal write
-- goes through it (the general transition path, signals, child results) but the
-- fast transition path in queries.sql, which holds the same statement (the parts
-- _journal_insert and _journal_upsert of queries.sql) inline because the function
-- call measured about 8% of W1 there.
CREATE OR REPLACE FUNCTION write_steps(
    p_run_id text, p_keys text[], p_kinds text[], p_statuses text[], p_outputs text[],
    p_errors text[], p_attempts integer[], p_started timestamptz[], p_completed timestamptz[]
) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_written text[];
BEGIN
    WITH up AS (
        {{query _journal_insert}}
        FROM (SELECT p_run_id AS id) f
        CROSS JOIN unnest(p_keys, p_kinds, p_statuses, p_outputs, p_errors, p_attempts,
                          p_started, p_completed) WITH ORDINALITY
             AS u(key, kind, status, output, error, attempts, started_at, completed_at, ord)
        {{query _journal_upsert}}
    )
    SELECT coalesce(array_agg(up.key), '{}') INTO v_written FROM up;
    RETURN v_written;
END
$$;
