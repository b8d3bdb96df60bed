-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Whether someone watches the run live (a row of watchers not past its time).
CREATE OR REPLACE FUNCTION watched(p_run_id text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM watchers WHERE run_id = p_run_id AND until > perdure_now());
END
$$;
