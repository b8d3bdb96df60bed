-- DAG flows (internal): ending a flow run.

-- End the live flow run p_run_id: 'completed' with p_output, or 'failed' with
-- p_error (then the failing step p_step is marked failed, its steps under way are
-- cancelled, and so are its live tasks, so their late results are fenced out).
-- Returns false if the run had ended already.
CREATE OR REPLACE FUNCTION flow_end(
    p_run_id text, p_status text, p_output json, p_step text, p_error jsonb
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_attempt integer;
BEGIN
    UPDATE runs SET
        status = p_status, output = p_output, error = p_error,
        completed_at = perdure_now(), updated_at = perdure_now(),
        available_at = 'infinity', wake_reason = NULL
    WHERE id = p_run_id AND status = 'running'
    RETURNING attempt INTO v_attempt;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO events (run_id, type, data)
    VALUES (p_run_id, p_status, CASE WHEN p_error IS NULL THEN NULL ELSE jsonb_build_object(
        'type', p_error ->> 'type', 'message', p_error ->> 'message') END);
    PERFORM send_end(p_run_id, p_status, v_attempt, coalesce(p_output::text, p_error::text));
    IF p_status = 'failed' THEN
        UPDATE flow_states SET status = 'failed', error = p_error, completed_at = perdure_now()
        WHERE run_id = p_run_id AND step = p_step;
        UPDATE flow_states SET status = 'cancelled', completed_at = perdure_now()
        WHERE run_id = p_run_id AND status = 'started';
        PERFORM cancel_descendants(p_run_id);
    END IF;
    RETURN true;
END
$$;

-- Complete the live flow run p_run_id of flow p_flow at p_version if every step of it
-- completed: its output is {<leaf step>: <output>} in definition order. Returns
-- whether it did. PL/pgSQL, not SQL: PostgreSQL before 18 plans a SQL function it
-- cannot inline on every call (and a SET clause rules inlining out); PL/pgSQL keeps
-- its plans.
CREATE OR REPLACE FUNCTION flow_complete(p_run_id text, p_flow text, p_version integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM flow_states WHERE run_id = p_run_id AND status <> 'completed') THEN
        RETURN false;
    END IF;
    RETURN flow_end(p_run_id, 'completed', (
        SELECT coalesce(json_object_agg(st.step, st.output ORDER BY st.step_index), '{}')
        FROM flow_states st
        WHERE st.run_id = p_run_id AND NOT EXISTS (
            SELECT 1 FROM flow_deps d
            WHERE d.flow = p_flow AND d.version = p_version AND d.dep = st.step)),
        NULL, NULL);
END
$$;

-- Step p_step of the flow run p_run_id (flow p_flow at p_version) completed: each of
-- its dependents waits for one dependency less. Returns how many of them are ready
-- now (created, none left) and how many are still created (ready or not).
CREATE OR REPLACE FUNCTION flow_step_completed(
    p_run_id text, p_flow text, p_version integer, p_step text,
    OUT ready integer, OUT waiting integer
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    WITH counted AS (
        UPDATE flow_states st SET remaining_deps = st.remaining_deps - 1
        FROM flow_deps d
        WHERE d.flow = p_flow AND d.version = p_version AND d.dep = p_step
          AND st.run_id = p_run_id AND st.step = d.step
        RETURNING st.status, st.remaining_deps
    )
    SELECT count(*) FILTER (WHERE c.status = 'created' AND c.remaining_deps = 0),
           count(*) FILTER (WHERE c.status = 'created')
    INTO ready, waiting
    FROM counted c;
END
$$;
