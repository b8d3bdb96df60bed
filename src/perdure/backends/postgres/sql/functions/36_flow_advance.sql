-- DAG flows (internal): what happens next in a flow run (the rules of the pure
-- planner, perdure/flows/planner.py, which the property tests hold this to).

-- Start every step of the live flow run p_run_id whose dependencies all completed
-- (created, remaining_deps 0):
-- a single step gets one task whose input is {"run": <run input>, <dep>: <output>...};
-- a map step one task per element of its source list (the run's input or a
-- dependency's output), an empty list completing it at once with [] (which may make
-- more steps ready: repeat), a non-list, or a list longer than the step's max_tasks
-- (its own, else the flow's), failing the run with an error naming the step, before
-- any of its tasks is inserted. Tasks are runs of kind 'task' (workflow '<flow>:<step>', claimable now,
-- carrying the flow-control keys stored for the step in flow_states). When
-- every step completed, the run completes with {<leaf step>: <output>}.
CREATE OR REPLACE FUNCTION flow_advance(p_run_id text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_step record;
    v_source json;
    v_count integer;
    v_progress boolean := true;
    v_inserted boolean := false;
    v_maps boolean;
    v_stop integer;
    v_max_tasks integer;
BEGIN
    SELECT * INTO v_run FROM runs WHERE id = p_run_id;
    SELECT f.max_tasks, EXISTS (SELECT 1 FROM flow_steps fs
                                WHERE fs.flow = v_run.workflow AND fs.version = v_run.version
                                  AND fs.map_over IS NOT NULL)
    INTO v_max_tasks, v_maps
    FROM flows f WHERE f.name = v_run.workflow AND f.version = v_run.version;
    WHILE v_progress LOOP
        v_progress := false;
        -- The steps are taken in definition order, and a ready map over something that
        -- is not a list, or over too long a list, fails the run: the steps after it are
        -- not started. A list whose text is at most 2 * max_tasks bytes cannot hold more
        -- than max_tasks elements (each takes a byte and a comma at least): only a longer
        -- one is counted here.
        v_stop := NULL;
        IF v_maps THEN
            SELECT st.step_index INTO v_stop
            FROM flow_states st
            JOIN flow_steps fs ON fs.flow = v_run.workflow AND fs.version = v_run.version
                              AND fs.step = st.step
            CROSS JOIN LATERAL (
                SELECT CASE WHEN fs.map_over = 'run' THEN v_run.input::json
                            ELSE (SELECT so.output FROM flow_states so
                                  WHERE so.run_id = p_run_id AND so.step = fs.map_over)
                       END AS list,
                       coalesce(fs.max_tasks, v_max_tasks) AS most
            ) src
            WHERE st.run_id = p_run_id AND st.status = 'created' AND fs.map_over IS NOT NULL
              AND st.remaining_deps = 0
              AND CASE WHEN json_typeof(src.list) <> 'array' THEN true
                       WHEN octet_length(src.list::text) <= 2::bigint * src.most THEN false
                       ELSE json_array_length(src.list) > src.most END
            ORDER BY st.step_index
            LIMIT 1;
        END IF;
        -- Every ready single step before it at once: one task each, its input the
        -- run's input and its dependencies' outputs.
        WITH ready AS (
            SELECT st.step, st.step_index, st.concurrency_key, st.fifo_key, st.rate_key
            FROM flow_states st
            JOIN flow_steps fs ON fs.flow = v_run.workflow AND fs.version = v_run.version
                              AND fs.step = st.step
            WHERE st.run_id = p_run_id AND st.status = 'created' AND fs.map_over IS NULL
              AND (v_stop IS NULL OR st.step_index < v_stop)
              AND st.remaining_deps = 0
        ),
        tasks AS (
            INSERT INTO runs (id, workflow, version, status, input, priority, parent_id,
                              parent_step, available_at, retention_days, kind, task_index,
                              concurrency_key, fifo_key, rate_key)
            SELECT p_run_id || ':' || r.step || ':0', v_run.workflow || ':' || r.step,
                   v_run.version, 'pending',
                   jsonb_build_object('run', v_run.input) || coalesce((
                       SELECT jsonb_object_agg(d.dep, ds.output::jsonb)
                       FROM flow_deps d
                       JOIN flow_states ds ON ds.run_id = p_run_id AND ds.step = d.dep
                       WHERE d.flow = v_run.workflow AND d.version = v_run.version
                         AND d.step = r.step), '{}'),
                   v_run.priority, p_run_id, r.step, perdure_now(), v_run.retention_days,
                   'task', 0, r.concurrency_key, r.fifo_key, r.rate_key
            FROM ready r
            ORDER BY r.step_index
            RETURNING id, workflow, version, parent_step
        ),
        logged AS (
            INSERT INTO events (run_id, type, data)
            SELECT t.id, 'created', jsonb_build_object(
                'workflow', t.workflow, 'version', t.version, 'parent_id', p_run_id,
                'task_index', 0)
            FROM tasks t
        )
        UPDATE flow_states st SET status = 'started', task_count = 1, remaining_tasks = 1,
            started_at = perdure_now()
        FROM tasks t
        WHERE st.run_id = p_run_id AND st.step = t.parent_step;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_inserted := v_inserted OR v_count > 0;
        -- Then the ready map steps, one by one (the first over a non-list, or over too
        -- long a list, fails the run).
        CONTINUE WHEN NOT v_maps;
        FOR v_step IN
            SELECT fs.step, fs.map_over, st.concurrency_key, st.fifo_key, st.rate_key,
                   coalesce(fs.max_tasks, v_max_tasks) AS max_tasks
            FROM flow_states st
            JOIN flow_steps fs ON fs.flow = v_run.workflow AND fs.version = v_run.version
                              AND fs.step = st.step
            WHERE st.run_id = p_run_id AND st.status = 'created' AND fs.map_over IS NOT NULL
            ORDER BY st.step_index
        LOOP
            -- Read now, not when the loop began: an empty map before it may have
            -- completed its last dependency.
            CONTINUE WHEN (SELECT st.remaining_deps FROM flow_states st
                           WHERE st.run_id = p_run_id AND st.step = v_step.step) > 0;
            IF v_step.map_over = 'run' THEN
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
            IF v_count > v_step.max_tasks THEN  -- checked before anything is inserted
                PERFORM flow_end(p_run_id, 'failed', NULL, v_step.step, jsonb_build_object(
                    'type', 'StepFailed', 'step', v_step.step,
                    'message', format(
                        'map step %L would create %s tasks, over its max_tasks of %s (flow %L: '
                        'set a higher max_tasks on the step or the flow to allow more)',
                        v_step.step, v_count, v_step.max_tasks, v_run.workflow)));
                RETURN;
            END IF;
            IF v_count = 0 THEN
                UPDATE flow_states SET status = 'completed', output = '[]'::json,
                    started_at = perdure_now(), completed_at = perdure_now()
                WHERE run_id = p_run_id AND step = v_step.step;
                PERFORM flow_step_completed(p_run_id, v_run.workflow, v_run.version, v_step.step);
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
    -- A step this call started is not completed: the run can only be complete if
    -- nothing was started.
    IF NOT v_inserted THEN
        PERFORM flow_complete(p_run_id, v_run.workflow, v_run.version);
    END IF;
END
$$;
