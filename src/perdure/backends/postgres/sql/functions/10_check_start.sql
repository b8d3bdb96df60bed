-- Helpers of the other functions (internal: not executable by PUBLIC).

-- The arguments every start shares (create_run(), start_flow_run()): the run id,
-- idempotency key, input, priority and retention. PD001 names the first bad one.
-- The run id follows check_id's rule.
CREATE OR REPLACE FUNCTION check_start(
    p_id text, p_idempotency_key text, p_input jsonb, p_priority integer,
    p_retention_days integer
) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'the run id must be 1-255 characters, got NULL' USING ERRCODE = 'PD001';
    END IF;
    PERFORM check_id('the run id', p_id);
    -- Only the length here: the keys perdure makes itself (a child's, a schedule
    -- tick's) hold a parent's id; the producers check a caller's key with check_id.
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
