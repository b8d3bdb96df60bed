-- DAG flows (internal): the rule that ends a task.

-- Task p_task_id of the live flow run p_flow_id ended (p_status 'completed' with
-- p_output, or 'failed' with p_error, after its retries or cancelled): called by
-- child_ended() under the flow run's lock, in the transaction that ended the task. A
-- failed task fails the run (error type StepFailed naming the step). A completed one
-- is counted; its step completes when all its tasks did (a map's output: the list in
-- element order) and flow_advance() starts what became ready. The task's own output
-- is taken from p_output, never re-read: the statement that ended it may be the one
-- calling here.
CREATE OR REPLACE FUNCTION flow_task_ended(
    p_flow_id text, p_task_id text, p_status text, p_output json, p_error jsonb
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_step text;
    v_index integer;
    v_map text;
    v_left integer;
    v_output json;
    v_flow text;
    v_version integer;
    v_ready integer;
    v_dependents integer;
BEGIN
    SELECT r.parent_step, r.task_index, fs.map_over, f.workflow, f.version
    INTO v_step, v_index, v_map, v_flow, v_version
    FROM runs r
    JOIN runs f ON f.id = p_flow_id
    JOIN flow_steps fs ON fs.flow = f.workflow AND fs.version = f.version AND fs.step = r.parent_step
    WHERE r.id = p_task_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_status <> 'completed' THEN
        PERFORM flow_end(p_flow_id, 'failed', NULL, v_step, jsonb_build_object(
            'type', 'StepFailed', 'step', v_step, 'task_index', v_index,
            'message', format('step %L failed: %s: %s', v_step, p_error ->> 'type',
                              p_error ->> 'message'),
            'cause', coalesce(p_error, '{}') - 'traceback'));
        RETURN false;
    END IF;
    -- One statement counts the task and, for a single step (one task), completes it.
    UPDATE flow_states SET
        remaining_tasks = remaining_tasks - 1,
        status = CASE WHEN v_map IS NULL THEN 'completed' ELSE status END,
        output = CASE WHEN v_map IS NULL THEN p_output ELSE output END,
        completed_at = CASE WHEN v_map IS NULL THEN perdure_now() ELSE completed_at END
    WHERE run_id = p_flow_id AND step = v_step AND status = 'started'
    RETURNING remaining_tasks INTO v_left;
    IF NOT FOUND OR v_left > 0 THEN
        RETURN false;
    END IF;
    IF v_map IS NOT NULL THEN
        SELECT json_agg(CASE WHEN r.id = p_task_id THEN p_output ELSE r.output END
                        ORDER BY r.task_index)
        INTO v_output
        FROM runs r
        WHERE r.parent_id = p_flow_id AND r.parent_step = v_step AND r.kind = 'task';
        UPDATE flow_states SET status = 'completed', output = v_output,
            completed_at = perdure_now()
        WHERE run_id = p_flow_id AND step = v_step;
    END IF;
    -- Only a dependent of this step can have become ready (then flow_advance() starts
    -- it). A step with dependents left waiting cannot end the run (they are created,
    -- not completed); one without any may be the last: the run ends when every step
    -- completed.
    SELECT c.ready, c.waiting INTO v_ready, v_dependents
    FROM flow_step_completed(p_flow_id, v_flow, v_version, v_step) c;
    IF v_ready > 0 THEN
        PERFORM flow_advance(p_flow_id);
    ELSIF v_dependents = 0 THEN
        PERFORM flow_complete(p_flow_id, v_flow, v_version);
    END IF;
    RETURN false;
END
$$;
