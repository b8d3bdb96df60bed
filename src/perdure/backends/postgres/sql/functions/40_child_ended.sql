-- Ends of runs: a child's end reaching its parent, cancellation (internal; the
-- producer cancel_run is in 90_producers.sql).

-- A child run ended (p_status 'completed' or 'failed'): write the live parent's
-- journal row p_parent_step (kind 'child') and make the parent claimable now
-- unless it is running. Locks the parent (after the child: child-then-parent
-- order) before it writes, so a parent parking at the same time either sees the
-- row or is woken here. Returns true if the parent was woken. A task of a flow run
-- goes to flow_task_ended() instead.
CREATE OR REPLACE FUNCTION child_ended(
    p_parent_id text, p_parent_step text, p_child_id text, p_child_created timestamptz,
    p_status text, p_output json, p_error jsonb
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_parent runs;
BEGIN
    SELECT * INTO v_parent FROM runs WHERE id = p_parent_id FOR UPDATE;
    IF NOT FOUND OR v_parent.status NOT IN ('pending', 'waiting', 'running') THEN
        RETURN false;
    END IF;
    IF v_parent.kind = 'flow' THEN  -- a DAG-flow task: its flow's rule, not a journal row
        RETURN flow_task_ended(p_parent_id, p_child_id, p_status, p_output, p_error);
    END IF;
    IF p_parent_step IS NOT NULL THEN
        DELETE FROM waits WHERE run_id = p_parent_id AND key = p_parent_step;  -- a timeout
        PERFORM write_step(p_parent_id, p_parent_step, 'child', p_status,
                           CASE WHEN p_status = 'completed' THEN p_output END,
                           CASE WHEN p_status = 'failed'
                                THEN coalesce(p_error, '{}') || jsonb_build_object('run_id', p_child_id)
                           END,
                           1, p_child_created, NULL);
    END IF;
    IF v_parent.status = 'running' THEN
        RETURN false;
    END IF;
    UPDATE runs SET available_at = perdure_now(), updated_at = perdure_now() WHERE id = p_parent_id;
    PERFORM send_notice('w', p_parent_id);
    RETURN true;
END
$$;
