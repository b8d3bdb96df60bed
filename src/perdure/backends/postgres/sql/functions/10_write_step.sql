-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Write one journal row unless a final (completed or failed) row holds the key.
-- Returns true if the row was written.
CREATE OR REPLACE FUNCTION write_step(
    p_run_id text, p_key text, p_kind text, p_status text, p_output json, p_error jsonb,
    p_attempts integer, p_started_at timestamptz, p_completed_at timestamptz
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO steps AS s (run_id, key, kind, status, output, error, attempts,
                            started_at, completed_at, recorded_at)
    VALUES (p_run_id, p_key, p_kind, p_status, p_output, p_error, p_attempts,
            p_started_at, coalesce(p_completed_at, perdure_now()), perdure_now())
    ON CONFLICT (run_id, key) DO UPDATE SET
        seq = excluded.seq, kind = excluded.kind, status = excluded.status,
        output = excluded.output, error = excluded.error, attempts = excluded.attempts,
        started_at = excluded.started_at, completed_at = excluded.completed_at,
        recorded_at = excluded.recorded_at
    WHERE s.status = 'retrying';
    RETURN FOUND;
END
$$;
