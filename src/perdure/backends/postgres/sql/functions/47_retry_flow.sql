-- Operations on ended runs (internal): retrying a DAG-flow run (retry_run() calls it
-- for a run of kind 'flow'; the pure planner's rerun() says the same for SQLite).

-- Run the ended flow run p_run (locked by the caller) again, its completed steps'
-- outputs kept. The steps that run again: every one that did not complete, and
-- p_from_step (PD001 if the flow has no such step) with every step that depends on
-- it, directly or not. Of those, a step whose input is kept (none of its dependencies
-- runs again) and that has tasks runs them again in place: every task if p_from_step
-- forced it, else the unfinished ones; each keeps its id (so its idempotency key),
-- starts its attempts afresh and gets a 'retried' event. Any other step is created
-- again (its old tasks deleted) and gets new tasks once its dependencies complete.
-- The run is running with attempt + 1 and a 'retried' event listing the steps.
CREATE OR REPLACE FUNCTION retry_flow(p_run runs, p_from_step text, p_by text) RETURNS runs
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_forced text[] := '{}';
    v_steps text[];
    v_in_place text[];
    v_step text;
    v_count integer;
    v_rerun integer := 0;
    v_run runs;
BEGIN
    IF p_from_step IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM flow_states
                       WHERE run_id = p_run.id AND step = p_from_step) THEN
            RAISE EXCEPTION 'flow run % has no step %', p_run.id, quote_literal(p_from_step)
                USING ERRCODE = 'PD001';
        END IF;
        WITH RECURSIVE below(step) AS (
            SELECT p_from_step
            UNION
            SELECT d.step FROM flow_deps d JOIN below b ON d.dep = b.step
            WHERE d.flow = p_run.workflow AND d.version = p_run.version
        )
        SELECT array_agg(b.step) INTO v_forced FROM below b;
    END IF;
    SELECT coalesce(array_agg(st.step ORDER BY st.step_index), '{}') INTO v_steps
    FROM flow_states st
    WHERE st.run_id = p_run.id AND (st.status <> 'completed' OR st.step = ANY (v_forced));
    SELECT coalesce(array_agg(st.step), '{}') INTO v_in_place
    FROM flow_states st
    WHERE st.run_id = p_run.id AND st.step = ANY (v_steps) AND st.task_count > 0
      AND NOT EXISTS (SELECT 1 FROM flow_deps d
                      WHERE d.flow = p_run.workflow AND d.version = p_run.version
                        AND d.step = st.step AND d.dep = ANY (v_steps));
    FOREACH v_step IN ARRAY v_steps LOOP
        IF v_step = ANY (v_in_place) THEN
            WITH again AS (
                UPDATE runs SET
                    status = 'pending', attempt = 1, output = NULL, error = NULL,
                    lease_owner = NULL, lease_expires_at = NULL, available_at = perdure_now(),
                    started_at = NULL, completed_at = NULL, wake_reason = NULL,
                    claims_since_progress = 0, step_attempts = 0, updated_at = perdure_now()
                WHERE parent_id = p_run.id AND parent_step = v_step AND kind = 'task'
                  AND (v_step = ANY (v_forced) OR status <> 'completed')
                RETURNING id
            ),
            logged AS (
                INSERT INTO events (run_id, type, data)
                SELECT a.id, 'retried', jsonb_build_object('by', p_by, 'attempt', p_run.attempt + 1)
                FROM again a
            )
            SELECT count(*) INTO v_count FROM again;
            UPDATE flow_states SET status = 'started', remaining_tasks = v_count, output = NULL,
                error = NULL, started_at = perdure_now(), completed_at = NULL
            WHERE run_id = p_run.id AND step = v_step;
            v_rerun := v_rerun + v_count;
        ELSE
            DELETE FROM runs WHERE parent_id = p_run.id AND parent_step = v_step AND kind = 'task';
            UPDATE flow_states SET status = 'created', task_count = 0, remaining_tasks = 0,
                output = NULL, error = NULL, started_at = NULL, completed_at = NULL,
                remaining_deps = (SELECT count(*) FROM flow_deps d
                                  WHERE d.flow = p_run.workflow AND d.version = p_run.version
                                    AND d.step = v_step AND d.dep = ANY (v_steps))
            WHERE run_id = p_run.id AND step = v_step;
        END IF;
    END LOOP;
    UPDATE runs SET
        status = 'running', attempt = attempt + 1, output = NULL, error = NULL,
        completed_at = NULL, available_at = 'infinity', wake_reason = NULL,
        updated_at = perdure_now()
    WHERE id = p_run.id
    RETURNING * INTO v_run;
    INSERT INTO events (run_id, type, data)
    VALUES (p_run.id, 'retried', jsonb_build_object(
        'from_step', p_from_step, 'steps', to_jsonb(v_steps), 'by', p_by,
        'attempt', v_run.attempt));
    IF v_rerun > 0 THEN
        PERFORM send_notice('w', p_run.id);
    END IF;
    PERFORM flow_advance(p_run.id);  -- the steps ready now get their tasks
    SELECT * INTO v_run FROM runs WHERE id = p_run.id;
    RETURN v_run;
END
$$;
