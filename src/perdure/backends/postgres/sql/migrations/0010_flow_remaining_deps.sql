-- DAG flows count what each step still waits for, as pgflow does: a step is ready
-- when it is created and remaining_deps is 0. A completing step decrements its
-- dependents' counts in one statement, where readiness was a join over the
-- dependencies for every candidate step (flow_deps_done, dropped here).
ALTER TABLE flow_states ADD COLUMN remaining_deps integer NOT NULL DEFAULT 0;

-- The steps of flow runs under way when this applies: their dependencies not
-- completed yet.
UPDATE flow_states st SET remaining_deps = (
    SELECT count(*)
    FROM runs f
    JOIN flow_deps d ON d.flow = f.workflow AND d.version = f.version AND d.step = st.step
    JOIN flow_states ds ON ds.run_id = st.run_id AND ds.step = d.dep
    WHERE f.id = st.run_id AND ds.status <> 'completed')
WHERE st.status = 'created';

DROP FUNCTION IF EXISTS flow_deps_done(text, text, integer, text);
