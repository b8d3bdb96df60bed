-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Validate an event name and payload as the Python API does (PD001 otherwise).
CREATE OR REPLACE FUNCTION check_event(p_event text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_event IS NULL OR p_event !~ '^[A-Za-z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION 'invalid event name %: use 1-128 letters, digits, ''.'', ''_'' or ''-''',
            quote_nullable(left(p_event, 200)) USING ERRCODE = 'PD001';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'the payload must be a JSON value, not SQL NULL' USING ERRCODE = 'PD001';
    END IF;
END
$$;
