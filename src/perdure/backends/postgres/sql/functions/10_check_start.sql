-- Helpers of the other functions (internal: not executable by PUBLIC).

-- The arguments every start shares (create_run(), start_flow_run()): the run id,
-- idempotency key, input, priority and retention. PD001 names the first bad one.
CREATE OR REPLACE FUNCTION check_start(
    p_id text, p_idempotency_key text, p_input jsonb, p_priority integer,
    p_retention_days integer
) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_id IS NULL OR length(p_id) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'the run id must be 1-255 characters, got %', quote_nullable(left(p_id, 80))
            USING ERRCODE = 'PD001';
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM check_key('the idempotency key', p_idempotency_key);
    END IF;
    IF p_input IS NULL THEN
        RAISE EXCEPTION 'the input must be a JSON value (use ''null''::jsonb for none), not SQL NULL'
            USING ERRCODE = 'PD001';
    END IF;
    IF p_priority IS NULL THEN
        RAISE EXCEPTION 'priority must be an integer, not NULL' USING ERRCODE = 'PD001';
    END IF;
    IF p_retention_days IS NULL OR p_retention_days < 0 THEN
        RAISE EXCEPTION 'invalid retention_days %: expected an integer >= 0',
            quote_nullable(p_retention_days) USING ERRCODE = 'PD001';
    END IF;
END
$$;
