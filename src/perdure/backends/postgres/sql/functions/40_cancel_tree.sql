-- Ends of runs: a child's end reaching its parent, cancellation (internal; the
-- producer cancel_run is in 90_producers.sql).

-- Cancel a live run and its live descendants (see cancel_descendants). A live
-- parent of the run gets a failed journal row (WorkflowCancelled) and becomes
-- claimable. Returns false if the run had ended; raises PD002 if there is no such run.
CREATE OR REPLACE FUNCTION cancel_tree(p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
BEGIN
    v_run := lock_run(p_run_id);
    IF v_run.status NOT IN ('pending', 'waiting', 'running') THEN
        RETURN false;
    END IF;
    UPDATE runs SET
        status = 'cancelled', completed_at = perdure_now(), updated_at = perdure_now(),
        lease_owner = NULL, lease_expires_at = NULL, wake_reason = NULL,
        available_at = 'infinity',
        -- after a rollback pass (cancel_with_rollback): what was rolled back
        error = CASE WHEN v_run.error ->> 'rollback' = 'true' THEN jsonb_build_object(
            'type', 'WorkflowCancelled',
            'message', format('run %s was cancelled after its rollbacks', p_run_id),
            'compensated', coalesce((SELECT jsonb_agg(substr(key, 11) ORDER BY seq) FROM steps
                                     WHERE run_id = p_run_id AND kind = 'rollback'
                                       AND status = 'completed'), '[]'),
            'compensation_failed', coalesce((SELECT jsonb_agg(substr(key, 11) ORDER BY seq)
                                             FROM steps WHERE run_id = p_run_id
                                               AND kind = 'rollback' AND status = 'failed'),
                                            '[]'))
            ELSE error END
    WHERE id = p_run_id;
    DELETE FROM waits WHERE run_id = p_run_id;
    DELETE FROM signals WHERE run_id = p_run_id;
    INSERT INTO events (run_id, type, data) VALUES (p_run_id, 'cancelled', NULL);
    PERFORM send_notice('c', p_run_id), send_end(p_run_id, 'cancelled', v_run.attempt, NULL);
    PERFORM cancel_descendants(p_run_id);
    IF v_run.parent_id IS NOT NULL THEN
        PERFORM child_ended(
            v_run.parent_id, v_run.parent_step, p_run_id, v_run.created_at, 'failed', NULL,
            jsonb_build_object('type', 'WorkflowCancelled',
                               'message', format('run %s was cancelled', p_run_id)));
    END IF;
    RETURN true;
END
$$;
