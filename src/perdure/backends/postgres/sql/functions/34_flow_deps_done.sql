-- DAG flows (internal): the readiness rule.

-- Whether every dependency of step p_step of the flow run p_run_id (flow p_flow at
-- p_version) completed: the one rule that makes a created step ready.
CREATE OR REPLACE FUNCTION flow_deps_done(
    p_run_id text, p_flow text, p_version integer, p_step text
) RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM flow_deps d
        JOIN flow_states ds ON ds.run_id = p_run_id AND ds.step = d.dep
        WHERE d.flow = p_flow AND d.version = p_version AND d.step = p_step
          AND ds.status <> 'completed')
$$;
