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

-- Send the notices of run p_run_id's end. On '<schema>.ended':
--   'e' <status> <attempt> ':' <id length> ':' <id> <body>
-- with <status> 'c' (completed), 'f' (failed), 'x' (cancelled) or '?' (read the run),
-- <attempt> the run's attempt (a waiter tells a stale notice from before a retry by
-- it), and <body> the run's output (completed) or error (failed) as JSON when the
-- notice can hold it, else empty: a waiter that gets it needs no read. The id's length
-- comes first because an id may hold any character. 'd:<id>' on '<schema>.done' is
-- still sent for the processes of earlier versions, which listen there during a
-- rolling upgrade.
CREATE OR REPLACE FUNCTION send_end(
    p_run_id text, p_status text, p_attempt integer, p_body text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify(current_schema() || '.done', 'd:' || p_run_id);
    PERFORM pg_notify(
        current_schema() || '.ended',
        'e' || CASE p_status WHEN 'completed' THEN 'c' WHEN 'failed' THEN 'f'
                             WHEN 'cancelled' THEN 'x' ELSE '?' END
            || coalesce(p_attempt, 0) || ':' || length(p_run_id) || ':' || p_run_id
            || CASE WHEN octet_length(p_body) + octet_length(p_run_id) <= 7800
                    THEN p_body ELSE '' END);
    RETURN true;
END
$$;
