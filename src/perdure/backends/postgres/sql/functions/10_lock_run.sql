-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Lock a run's row for the rest of the transaction and return it; PD002 if there is
-- no such run.
CREATE OR REPLACE FUNCTION lock_run(p_run_id text) RETURNS runs
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
BEGIN
    SELECT * INTO v_run FROM runs WHERE id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run with id %', quote_nullable(p_run_id)
            USING ERRCODE = 'PD002', DETAIL = coalesce(p_run_id, '');
    END IF;
    RETURN v_run;
END
$$;
