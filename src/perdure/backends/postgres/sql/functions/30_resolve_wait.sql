-- Signals and published events (internal; the producers are in 90_producers.sql).

-- Resolve the wait p_key of a locked live run with p_payload: a completed journal
-- row (kind 'wait', output = payload), the wait deleted, a 'signaled' event, and
-- the run claimable now (wake notice) unless it is running.
CREATE OR REPLACE FUNCTION resolve_wait(p_run runs, p_key text, p_event text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_since timestamptz;
BEGIN
    DELETE FROM waits WHERE run_id = p_run.id AND key = p_key RETURNING created_at INTO v_since;
    PERFORM write_step(p_run.id, p_key, 'wait', 'completed', p_payload::text::json, NULL, 1,
                       v_since, NULL);
    INSERT INTO events (run_id, type, data)
    VALUES (p_run.id, 'signaled', jsonb_build_object('step', p_key, 'event', p_event));
    PERFORM drop_sibling_waits(p_run.id, p_key);
    IF p_run.status <> 'running' THEN
        UPDATE runs SET available_at = perdure_now(), updated_at = perdure_now() WHERE id = p_run.id;
        PERFORM send_notice('w', p_run.id);
    END IF;
END
$$;
