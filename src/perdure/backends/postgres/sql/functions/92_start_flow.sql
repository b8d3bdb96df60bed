-- DAG flows from SQL, any language (DESIGN §6): start a flow run.

-- Start a run of flow `flow` (its highest version unless `version`): returns its id,
-- its status (a run status: 'running', or 'completed'/'failed' when it ended at once)
-- and how many steps remain. The same id or idempotency key returns the
-- existing run (`id` chooses the run's id).
-- Example: SELECT * FROM perdure.start_flow('analyze_website', '{"url": "https://example.com"}');
CREATE OR REPLACE FUNCTION start_flow(
    flow text, input jsonb DEFAULT 'null', id text DEFAULT NULL,
    idempotency_key text DEFAULT NULL, priority integer DEFAULT 100,
    version integer DEFAULT NULL
) RETURNS TABLE (run_id text, status text, remaining_steps integer)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    v_result record;
    v_id text;
BEGIN
    PERFORM check_value('the input', input);
    PERFORM check_id('the run id', id);
    PERFORM check_id('the idempotency key', idempotency_key);
    v_id := coalesce(id, new_run_id());
    SELECT * INTO v_result FROM start_flow_run(
        v_id, flow, version, input, coalesce(priority, 100), idempotency_key, 30);
    IF (v_result.run).kind <> 'flow' THEN
        RAISE EXCEPTION 'run id % names a run that is not a flow run', quote_literal(v_id)
            USING ERRCODE = 'PD001';
    END IF;
    RETURN QUERY
    SELECT (v_result.run).id, (v_result.run).status,
           (SELECT count(*)::integer FROM flow_states st
            WHERE st.run_id = (v_result.run).id AND st.status <> 'completed');
END
$$;
