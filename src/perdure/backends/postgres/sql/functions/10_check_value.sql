-- Helpers of the other functions (internal: not executable by PUBLIC).

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
