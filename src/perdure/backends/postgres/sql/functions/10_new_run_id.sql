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
