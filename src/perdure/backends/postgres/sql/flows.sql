-- DAG flows on PostgreSQL: the queries of _flows.py (the logic is in
-- functions/3*_flow_*.sql and the public functions/9*_*.sql).

-- name: get_flow
-- A stored flow (that version, else the highest) with its steps and dependencies.
SELECT f.name, f.version, f.max_attempts, f.base_delay, f.timeout,
       (SELECT coalesce(json_agg(json_build_array(
                   s.step, s.map_over, s.max_attempts, s.base_delay, s.timeout,
                   (SELECT coalesce(json_agg(d.dep ORDER BY d.dep_index), '[]')
                    FROM flow_deps d
                    WHERE d.flow = s.flow AND d.version = s.version AND d.step = s.step))
               ORDER BY s.step_index), '[]')
        FROM flow_steps s WHERE s.flow = f.name AND s.version = f.version)
FROM flows f
WHERE f.name = %(name)s::text AND (%(version)s::integer IS NULL OR f.version = %(version)s::integer)
ORDER BY f.version DESC
LIMIT 1

-- name: create_flow
SELECT create_flow(%(name)s::text, %(max_attempts)s::integer, %(base_delay)s::double precision,
                   %(timeout)s::double precision, %(version)s::integer)

-- name: add_step
SELECT add_step(%(flow)s::text, %(step)s::text, %(deps)s::text[], %(max_attempts)s::integer,
                %(base_delay)s::double precision, %(timeout)s::double precision,
                %(step_type)s::text, %(map_over)s::text, %(version)s::integer)

-- name: start_flow_run
-- Start a flow run through start_flow_run(); the row as create_run's.
SELECT c.created,
       (c.run).id, (c.run).workflow, (c.run).version, (c.run).status, (c.run).input,
       (c.run).output, (c.run).error, (c.run).attempt, (c.run).priority, (c.run).parent_id,
       (c.run).created_at, (c.run).started_at, (c.run).completed_at,
       CASE WHEN (c.run).status IN ('pending', 'waiting') AND (c.run).available_at <> 'infinity'
            THEN (c.run).available_at END,
       (c.run).deadline_at, (c.run).idempotency_key, (c.run).wake_reason,
       (c.run).retention_days, (c.run).updated_at, (c.run).parent_step,
       NOT c.created AND (c.run).input <> %(input)s::jsonb
FROM start_flow_run(
    %(id)s::text, %(workflow)s::text, %(version)s::integer, %(input)s::jsonb,
    %(priority)s::integer, %(idempotency_key)s::text, %(retention_days)s::integer
) AS c

-- name: run_kind
SELECT kind FROM runs WHERE id = %(run_id)s::text

-- name: flow_steps
-- A flow run's steps in definition order, each with its tasks.
SELECT st.step, st.status, st.output, st.error, st.started_at, st.completed_at,
       (SELECT coalesce(json_agg(json_build_array(
                   t.task_index, t.status, t.attempt, t.output, t.error, t.id,
                   t.started_at, t.completed_at) ORDER BY t.task_index), '[]')
        FROM runs t
        WHERE t.parent_id = st.run_id AND t.parent_step = st.step AND t.kind = 'task')
FROM flow_states st
WHERE st.run_id = %(run_id)s::text
ORDER BY st.step_index
