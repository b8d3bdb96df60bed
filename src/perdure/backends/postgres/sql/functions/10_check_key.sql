-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A key that is never a path segment (concurrency, FIFO, debounce key): 1-255
-- characters (PostgreSQL text holds no NUL).
CREATE OR REPLACE FUNCTION check_key(p_what text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_key IS NOT NULL AND NOT length(p_key) BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION '% must be 1-255 characters, got %', p_what, length(p_key)
            USING ERRCODE = 'PD001';
    END IF;
END
$$;

-- A run id or idempotency key a caller chooses (NULL passes): 1-255 characters, none
-- of '/', '\', '?', '#', '%' or a control character (C0, DEL, C1), and not '.' or '..',
-- so that every id stored can be addressed as one URL path segment. The same rule as
-- Python's check_id (perdure/validation.py).
CREATE OR REPLACE FUNCTION check_id(p_what text, p_id text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_id IS NOT NULL AND (
        length(p_id) NOT BETWEEN 1 AND 255
        OR p_id IN ('.', '..')
        OR p_id ~ '[\x01-\x1f\x7f-\x9f/\\?#%]'
    ) THEN
        RAISE EXCEPTION '% must be 1-255 characters, none of ''/'', ''\'', ''?'', ''#'', ''%%'' or a control character, and not ''.'' or ''..''; got %',
            p_what, quote_literal(left(p_id, 80)) USING ERRCODE = 'PD001';
    END IF;
END
$$;
