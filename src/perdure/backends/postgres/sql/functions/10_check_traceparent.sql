-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A starter's trace context: NULL or a W3C traceparent (00-<trace>-<span>-<flags>).
CREATE OR REPLACE FUNCTION check_traceparent(p_traceparent text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_traceparent IS NOT NULL
       AND p_traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
        RAISE EXCEPTION 'invalid traceparent %: expected a W3C traceparent (00-<trace>-<span>-<flags>)',
            quote_literal(left(p_traceparent, 80)) USING ERRCODE = 'PD001';
    END IF;
END
$$;
