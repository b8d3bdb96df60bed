-- Helpers of the other functions (internal: not executable by PUBLIC).

-- Send a notice for a run: kind 'w' (wake) and 'c' (cancel) go to '<schema>.wake',
-- kind 'd' (done) to '<schema>.done', kind 'p' (progress: the history of a live run
-- grew) to '<schema>.progress', which only watchers listen to. Delivered at commit.
CREATE OR REPLACE FUNCTION send_notice(p_kind text, p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify(
        current_schema() || CASE p_kind WHEN 'd' THEN '.done' WHEN 'p' THEN '.progress'
                                        ELSE '.wake' END,
        p_kind || ':' || p_run_id);
    RETURN true;
END
$$;
