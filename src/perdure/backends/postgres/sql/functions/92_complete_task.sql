-- DAG flows from SQL, any language (DESIGN §6): a task worker's three calls.

-- Complete task (run_id, step, task_index) with `output` under `lease_token`, in one
-- transaction with its consequences (the step completes when all its tasks did, the
-- steps that became ready get their tasks, the run completes when nothing remains).
-- True when it took effect; false, with a notice, for a stale lease token (the task
-- was taken over, cancelled or ended): nothing changes.
-- Example: SELECT perdure.complete_task(run_id, step, task_index, '{"score": 0.8}', lease_token);
CREATE OR REPLACE FUNCTION complete_task(
    run_id text, step text, task_index integer, output jsonb, lease_token bigint
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    v_ok boolean;
BEGIN
    PERFORM check_value('the output', output);
    SELECT t.ok INTO v_ok FROM apply_transition(
        run_id || ':' || step || ':' || task_index, lease_token,
        '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
        ARRAY['completed'], ARRAY[NULL], 1, 'complete', NULL, NULL, output::text, NULL,
        '{}', '{}', '{}', '{}', NULL) AS t;
    IF NOT v_ok THEN
        RAISE NOTICE 'perdure: task %/%/% is not held under this lease token: nothing changed',
            run_id, step, task_index;
    END IF;
    RETURN v_ok;
END
$$;
