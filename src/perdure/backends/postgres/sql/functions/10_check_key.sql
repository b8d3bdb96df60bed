-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A run id or idempotency key: 1-255 characters (PostgreSQL text holds no NUL).
CREATE OR REPLACE FUNCTION check_key(p_what text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_key IS NOT NULL AND NOT length(p_key) BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION '% must be 1-255 characters, got %', p_what, length(p_key)
            USING ERRCODE = 'PD001';
    END IF;
END
$$;
