-- Helpers of the other functions (internal: not executable by PUBLIC).
-- A new run id: a ULID (48-bit milliseconds + 80 random bits, Crockford base32),
-- 26 characters that sort by creation time, like perdure.ids.new_run_id().
CREATE OR REPLACE FUNCTION new_run_id() RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_alphabet constant text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    v_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_bytes bytea := uuid_send(gen_random_uuid());
    v_hi bigint := 0;
    v_lo bigint := 0;
    v_out text := '';
    v_i integer;
BEGIN
    -- 40 random bits from bytes 0-4 and 40 from bytes 10-14 (a v4 uuid keeps its
    -- version and variant bits in bytes 6 and 8).
    FOR v_i IN 0..4 LOOP
        v_hi := (v_hi << 8) | get_byte(v_bytes, v_i);
        v_lo := (v_lo << 8) | get_byte(v_bytes, v_i + 10);
    END LOOP;
    FOR v_i IN REVERSE 9..0 LOOP
        v_out := v_out || substr(v_alphabet, ((v_ms >> (5 * v_i)) & 31)::integer + 1, 1);
    END LOOP;
    FOR v_i IN REVERSE 7..0 LOOP
        v_out := v_out || substr(v_alphabet, ((v_hi >> (5 * v_i)) & 31)::integer + 1, 1);
    END LOOP;
    FOR v_i IN REVERSE 7..0 LOOP
        v_out := v_out || substr(v_alphabet, ((v_lo >> (5 * v_i)) & 31)::integer + 1, 1);
    END LOOP;
    RETURN v_out;
END
$$;

-- A topic pattern ('*' matches any characters) as a LIKE pattern with escape '\'.
CREATE OR REPLACE FUNCTION like_pattern(p_pattern text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SECURITY INVOKER SET search_path FROM CURRENT AS $$
    SELECT replace(replace(replace(replace(p_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;

-- Send a notice for a run: kind 'w' (wake) and 'c' (cancel) go to '<schema>.wake',
-- kind 'd' (done) to '<schema>.done'. Delivered when the transaction commits.
CREATE OR REPLACE FUNCTION send_notice(p_kind text, p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify(
        current_schema() || CASE WHEN p_kind = 'd' THEN '.done' ELSE '.wake' END,
        p_kind || ':' || p_run_id);
    RETURN true;
END
$$;

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
            p_started_at, coalesce(p_completed_at, now()), now())
    ON CONFLICT (run_id, key) DO UPDATE SET
        seq = excluded.seq, kind = excluded.kind, status = excluded.status,
        output = excluded.output, error = excluded.error, attempts = excluded.attempts,
        started_at = excluded.started_at, completed_at = excluded.completed_at,
        recorded_at = excluded.recorded_at
    WHERE s.status = 'retrying';
    RETURN FOUND;
END
$$;


-- The limits every entry applies (DESIGN §4 Values, the same as perdure.validation):
-- a JSON value of at most 10 MiB as text and 64 levels of nesting. PD001 otherwise,
-- naming p_what. Only the SQL producers call this: values from Python arrive checked.
CREATE OR REPLACE FUNCTION check_value(p_what text, p_value jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_text text;
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION '% must be a JSON value (''null''::jsonb for none), not SQL NULL', p_what
            USING ERRCODE = 'PD001';
    END IF;
    v_text := p_value::text;
    IF octet_length(v_text) > 10485760 THEN
        RAISE EXCEPTION '% is % bytes of JSON, over the limit of 10485760 bytes',
            p_what, octet_length(v_text) USING ERRCODE = 'PD001';
    END IF;
    -- Fewer than 65 brackets cannot nest 65 deep; else look for a container at level 64.
    IF length(v_text) - length(translate(v_text, '[{', '')) > 64
       AND jsonb_path_exists(p_value,
           'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION '% is nested more than 64 levels deep, the limit', p_what
            USING ERRCODE = 'PD001';
    END IF;
END
$$;

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

-- A time given by a caller: finite and within 100 years of now.
CREATE OR REPLACE FUNCTION check_time(p_what text, p_at timestamptz) RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_at IS NOT NULL AND NOT p_at BETWEEN now() - interval '100 years'
                                         AND now() + interval '100 years' THEN
        RAISE EXCEPTION '% % is not within 100 years of now', p_what, p_at
            USING ERRCODE = 'PD001';
    END IF;
END
$$;

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
