-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Write one journal row unless a final (completed or failed) row holds the key
-- (write_steps() for one row). Returns true if the row was written.
CREATE OR REPLACE FUNCTION write_step(
    p_run_id text, p_key text, p_kind text, p_status text, p_output json, p_error jsonb,
    p_attempts integer, p_started_at timestamptz, p_completed_at timestamptz
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    RETURN cardinality(write_steps(
        p_run_id, ARRAY[p_key], ARRAY[p_kind], ARRAY[p_status], ARRAY[p_output::text],
        ARRAY[p_error::text], ARRAY[p_attempts], ARRAY[p_started_at], ARRAY[p_completed_at]
    )) > 0;
END
$$;
