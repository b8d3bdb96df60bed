-- Helpers of the other functions (internal: not executable by PUBLIC).

-- A wait for the first of several events registers one wait per event under keys
-- '<step>@<event>'. Once one of them is resolved the others go, so the signals they
-- would have taken stay buffered. No-op for a key without '@'.
CREATE OR REPLACE FUNCTION drop_sibling_waits(p_run_id text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_prefix text;
BEGIN
    IF position('@' IN p_key) = 0 THEN
        RETURN;
    END IF;
    v_prefix := left(p_key, length(p_key) - position('@' IN reverse(p_key)) + 1);
    DELETE FROM waits
    WHERE run_id = p_run_id AND left(key, length(v_prefix)) = v_prefix AND key <> p_key;
END
$$;
