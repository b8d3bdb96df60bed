-- DAG flows (internal): what happens next in a flow run (the rules of the pure
-- planner, perdure/flows/planner.py, which the property tests hold this to).

-- Start every step of the live flow run p_run_id whose dependencies all completed:
-- a single step gets one task whose input is {"run": <run input>, <dep>: <output>...};
-- a map step one task per element of its source list (the run's input or a
-- dependency's output), an empty list completing it at once with [] (which may make
-- more steps ready: repeat), a non-list failing the run with an error naming the
-- step. Tasks are runs of kind 'task' (workflow '<flow>:<step>', claimable now,
-- carrying the flow-control keys stored for the step in flow_states). When
-- every step completed, the run completes with {<leaf step>: <output>}.
CREATE OR REPLACE FUNCTION flow_advance(p_run_id text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_step record;
    v_source json;
    v_input jsonb;
    v_count integer;
    v_progress boolean := true;
    v_inserted boolean := false;
BEGIN
    SELECT * INTO v_run FROM runs WHERE id = p_run_id;
    WHILE v_progress LOOP
        v_progress := false;
        FOR v_step IN
            SELECT fs.step, fs.map_over, st.concurrency_key, st.fifo_key, st.rate_key
            FROM flow_states st
            JOIN flow_steps fs ON fs.flow = v_run.workflow AND fs.version = v_run.version
                              AND fs.step = st.step
            WHERE st.run_id = p_run_id AND st.status = 'created'
            ORDER BY st.step_index
        LOOP
            CONTINUE WHEN EXISTS (
                SELECT 1 FROM flow_deps d
                JOIN flow_states ds ON ds.run_id = p_run_id AND ds.step = d.dep
                WHERE d.flow = v_run.workflow AND d.version = v_run.version
                  AND d.step = v_step.step AND ds.status <> 'completed');
            IF v_step.map_over IS NULL THEN
                SELECT jsonb_build_object('run', v_run.input)
                       || coalesce(jsonb_object_agg(d.dep, ds.output::jsonb), '{}')
                INTO v_input
                FROM flow_deps d
                JOIN flow_states ds ON ds.run_id = p_run_id AND ds.step = d.dep
                WHERE d.flow = v_run.workflow AND d.version = v_run.version
                  AND d.step = v_step.step;
                v_source := json_build_array(v_input);
            ELSIF v_step.map_over = 'run' THEN
                v_source := v_run.input::json;
            ELSE
                SELECT output INTO v_source FROM flow_states
                WHERE run_id = p_run_id AND step = v_step.map_over;
            END IF;
            IF json_typeof(v_source) <> 'array' THEN
                PERFORM flow_end(p_run_id, 'failed', NULL, v_step.step, jsonb_build_object(
                    'type', 'StepFailed', 'step', v_step.step,
                    'message', format(
                        'map step %L of flow %L needs a list to map over, but %s is %s',
                        v_step.step, v_run.workflow,
                        CASE WHEN v_step.map_over = 'run' THEN 'the run''s input'
                             ELSE format('the output of step %L', v_step.map_over) END,
                        CASE json_typeof(v_source) WHEN 'object' THEN 'an object'
                             WHEN 'string' THEN 'a string' WHEN 'number' THEN 'a number'
                             WHEN 'boolean' THEN 'a boolean' ELSE 'null' END)));
                RETURN;
            END IF;
            v_count := json_array_length(v_source);
            IF v_count = 0 THEN
                UPDATE flow_states SET status = 'completed', output = '[]'::json,
                    started_at = perdure_now(), completed_at = perdure_now()
                WHERE run_id = p_run_id AND step = v_step.step;
                v_progress := true;
                CONTINUE;
            END IF;
            WITH tasks AS (
                INSERT INTO runs (id, workflow, version, status, input, priority, parent_id,
                                  parent_step, available_at, retention_days, kind, task_index,
                                  concurrency_key, fifo_key, rate_key)
                SELECT p_run_id || ':' || v_step.step || ':' || (e.ord - 1),
                       v_run.workflow || ':' || v_step.step, v_run.version, 'pending',
                       e.value::jsonb, v_run.priority, p_run_id, v_step.step, perdure_now(),
                       v_run.retention_days, 'task', e.ord - 1,
                       v_step.concurrency_key, v_step.fifo_key, v_step.rate_key
                FROM json_array_elements(v_source) WITH ORDINALITY AS e(value, ord)
                RETURNING id, workflow, version, task_index
            )
            INSERT INTO events (run_id, type, data)
            SELECT t.id, 'created', jsonb_build_object(
                'workflow', t.workflow, 'version', t.version, 'parent_id', p_run_id,
                'task_index', t.task_index)
            FROM tasks t;
            UPDATE flow_states SET status = 'started', task_count = v_count,
                remaining_tasks = v_count, started_at = perdure_now()
            WHERE run_id = p_run_id AND step = v_step.step;
            v_inserted := true;
        END LOOP;
    END LOOP;
    -- Workers claim by polling or on any wake; a worker that claims on complete (it
    -- completed a task of this run in this transaction) sends the wake only if tasks
    -- it did not take remain (claim_on_complete in flows.sql).
    IF v_inserted AND current_setting('perdure.claim_on_complete', true)
                      IS DISTINCT FROM p_run_id THEN
        PERFORM send_notice('w', p_run_id);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM flow_states WHERE run_id = p_run_id AND status <> 'completed')
    THEN
        PERFORM flow_end(p_run_id, 'completed', (
            SELECT coalesce(json_object_agg(st.step, st.output ORDER BY st.step_index), '{}')
            FROM flow_states st
            WHERE st.run_id = p_run_id AND NOT EXISTS (
                SELECT 1 FROM flow_deps d
                WHERE d.flow = v_run.workflow AND d.version = v_run.version
                  AND d.dep = st.step)), NULL, NULL);
    END IF;
END
$$;
