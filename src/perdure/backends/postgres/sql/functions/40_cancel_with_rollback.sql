-- Ends of runs (internal; App.cancel(run_id, rollback=True) calls it).

-- Cancel a live run after the rollbacks of its completed steps have run: the run is
-- handed to a worker for a rollback pass (waiting, claimable now, its lease taken
-- from the worker that held it, its error marking the rollback), its waits and
-- buffered signals go, its live children are cancelled, and a 'cancelling' event is
-- recorded; the worker ends it 'cancelled' once the rollbacks ran. A run with no
-- completed step is cancelled at once. False if the run had ended; PD002 if none.
CREATE OR REPLACE FUNCTION cancel_with_rollback(p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
BEGIN
    v_run := lock_run(p_run_id);
    IF v_run.status NOT IN ('pending', 'waiting', 'running') THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM steps WHERE run_id = p_run_id AND kind = 'run' AND status = 'completed'
    ) THEN
        RETURN cancel_tree(p_run_id);
    END IF;
    UPDATE runs SET
        status = 'waiting', available_at = perdure_now(), wake_reason = NULL,
        lease_owner = NULL, lease_expires_at = NULL, claims_since_progress = 0,
        error = jsonb_build_object(
            'type', 'WorkflowCancelled', 'rollback', true,
            'message', format('run %s was cancelled; its rollbacks run first', p_run_id)),
        updated_at = perdure_now()
    WHERE id = p_run_id;
    DELETE FROM waits WHERE run_id = p_run_id;
    DELETE FROM signals WHERE run_id = p_run_id;
    INSERT INTO events (run_id, type, data)
    VALUES (p_run_id, 'cancelling', jsonb_build_object('rollback', true));
    PERFORM send_notice('c', p_run_id), send_notice('w', p_run_id);
    PERFORM cancel_descendants(p_run_id);
    RETURN true;
END
$$;
