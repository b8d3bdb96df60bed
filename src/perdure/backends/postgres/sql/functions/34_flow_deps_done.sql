-- DAG flows (internal): the readiness rule.

-- Whether every dependency of step p_step of the flow run p_run_id (flow p_flow at
-- p_version) completed: the one rule that makes a created step ready. PL/pgSQL, not
-- SQL: PostgreSQL before 18 plans a SQL function's query on every call it cannot
-- inline (and a query with a sub-select is never inlined); PL/pgSQL keeps the plan.
CREATE OR REPLACE FUNCTION flow_deps_done(
    p_run_id text, p_flow text, p_version integer, p_step text
) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    RETURN NOT EXISTS (
        SELECT 1 FROM flow_deps d
        JOIN flow_states ds ON ds.run_id = p_run_id AND ds.step = d.dep
        WHERE d.flow = p_flow AND d.version = p_version AND d.step = p_step
          AND ds.status <> 'completed');
END
$$;
