-- DAG flows on PostgreSQL: the queries of _flows.py (the logic is in
-- functions/3*_flow_*.sql and the public functions/9*_*.sql).

-- name: get_flow
-- A stored flow (that version, else the highest) with its steps and dependencies.
SELECT f.name, f.version, f.max_attempts, f.base_delay, f.timeout, f.max_tasks,
       (SELECT coalesce(json_agg(json_build_array(
                   s.step, s.map_over, s.max_attempts, s.base_delay, s.timeout,
                   s.concurrency, s.key_concurrency, s.rate_limit, s.rate_period,
                   s.rate_keyed, s.fifo, s.max_tasks,
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
                   %(timeout)s::double precision, %(version)s::integer, %(max_tasks)s::integer)

-- name: add_step
SELECT add_step(%(flow)s::text, %(step)s::text, %(deps)s::text[], %(max_attempts)s::integer,
                %(base_delay)s::double precision, %(timeout)s::double precision,
                %(step_type)s::text, %(map_over)s::text, %(version)s::integer,
                %(max_tasks)s::integer)

-- name: set_step_limits
-- A new step's flow-control limits (part of its shape; add_step stores the rest).
UPDATE flow_steps SET concurrency = %(concurrency)s::integer,
    key_concurrency = %(key_concurrency)s::integer, rate_limit = %(rate_limit)s::integer,
    rate_period = %(rate_period)s::double precision, rate_keyed = %(rate_keyed)s::boolean,
    fifo = %(fifo)s::boolean
WHERE flow = %(flow)s::text AND version = %(version)s::integer AND step = %(step)s::text

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

-- name: quiet_flow_wake
-- Claim on complete (before the transition that completes the task): the flow run of
-- task %(run_id)s sends no wake notice for the tasks it starts in this transaction
-- (flow_advance() reads the setting); claim_on_complete decides and resets it.
SELECT set_config('perdure.claim_on_complete',
                  coalesce((SELECT parent_id FROM runs WHERE id = %(run_id)s::text), ''), true)

-- name: claim_on_complete
-- Claim on complete (after the transition): if it completed task %(run_id)s under
-- %(token)s in this transaction, lease up to %(limit)s of the tasks of the same flow
-- run that this transaction started, of the served pairs, to the worker, exactly as
-- claim_runs does, and send the flow run's wake notice if any of them remain. Always one row at least
-- (all NULL when nothing was claimed), so the notice and the reset always happen.
WITH ended AS (
    -- The row by its key alone, its conditions checked after (OFFSET 0 keeps them out
    -- of the scan): beside kind = 'task', a plan made without statistics read the
    -- whole tasks index, every task ever run, at each completion.
    SELECT t.parent_id AS flow_id
    FROM (SELECT * FROM runs WHERE id = %(run_id)s::text OFFSET 0) t
    WHERE t.lease_token = %(token)s::bigint
      AND t.kind = 'task' AND t.status = 'completed' AND t.completed_at = perdure_now()
),
{{_lease_new_tasks}}

-- name: handed_before
-- Claim on complete after an ambiguous commit: the transition that completes task
-- %(run_id)s under %(token)s was fenced out because an earlier attempt of it committed
-- (its answer was lost). The tasks that commit leased to %(worker)s (their lease
-- taken at the time the task completed, still live and still theirs) as claim rows,
-- for the worker to start now instead of after their lease.
{{_handed_rows}}
FROM (SELECT * FROM runs WHERE id = %(run_id)s::text OFFSET 0) t
JOIN runs c ON c.parent_id = t.parent_id
WHERE t.lease_token = %(token)s::bigint AND t.kind = 'task' AND t.status = 'completed'
  AND c.kind = 'task' AND c.status = 'running' AND c.lease_owner = %(worker)s::text
  AND c.updated_at = t.completed_at AND c.lease_expires_at > perdure_now()
ORDER BY c.priority, c.id

-- name: handed_at_start
-- A start handed to a worker of the starting process whose answer was lost (run
-- %(run_id)s, new): what it leased to %(worker)s if it committed, as claim rows: the
-- run itself, or a flow run's first tasks, leased at the run's creation, untouched
-- since and still under that lease.
{{_handed_rows}}
FROM (SELECT * FROM runs WHERE id = %(run_id)s::text OFFSET 0) f
JOIN runs c ON (c.id = f.id AND c.kind = 'workflow') OR (c.parent_id = f.id AND c.kind = 'task')
WHERE c.status = 'running' AND c.lease_owner = %(worker)s::text
  AND c.updated_at = f.created_at AND c.lease_expires_at > perdure_now()
ORDER BY c.priority, c.id

-- name: _handed_rows
-- (a part) The claim rows of the runs c handed over again after a lost answer: just
-- started, so no journal and no waits.
SELECT c.id, c.workflow, c.version, c.status, c.input, c.output, c.error, c.attempt,
       c.priority, c.parent_id, c.created_at, c.started_at, c.completed_at,
       NULL::timestamptz, c.deadline_at, c.idempotency_key, c.wake_reason, c.retention_days,
       c.updated_at, c.parent_step,
       c.lease_token, c.claims_since_progress, c.step_attempts,
       false, perdure_now(),
       NULL::json, NULL::json,
       c.traceparent

-- name: quiet_start_wake
-- A flow start handed to a worker of the starting process (before start_flow_run):
-- flow run %(id)s sends no wake notice for the tasks it starts in this transaction;
-- claim_started_tasks decides and resets it.
SELECT set_config('perdure.claim_on_complete', %(id)s::text, true)

-- name: claim_started_tasks
-- A flow start handed to a worker of the starting process (after start_flow_run):
-- lease up to %(limit)s of the tasks this transaction started for flow run %(id)s, as
-- claim_on_complete does.
WITH ended AS (
    SELECT %(id)s::text AS flow_id
),
{{_lease_new_tasks}}

-- name: _lease_new_tasks
-- (a part) The end of claim_on_complete and claim_started_tasks, after their "ended"
-- CTE (the flow run): lease up to %(limit)s of the tasks of the served pairs that this
-- transaction started to %(worker)s, and send the flow run's wake notice if any remain.
served AS (
    SELECT p.workflow, p.version
    FROM unnest(%(workflows)s::text[], %(versions)s::integer[]) AS p(workflow, version)
),
due AS (
    SELECT r.id, r.status, r.lease_owner
    FROM runs r
    WHERE r.parent_id = (SELECT e.flow_id FROM ended e)
      AND r.kind = 'task' AND r.status = 'pending'
      AND r.created_at = perdure_now()  -- started by this transaction
      AND r.available_at <= perdure_now()
      AND (r.workflow, r.version) IN (SELECT s.workflow, s.version FROM served s)
    ORDER BY r.priority, r.available_at, r.id
    LIMIT %(limit)s::integer
    FOR UPDATE OF r SKIP LOCKED
),
claimed AS (
    UPDATE runs AS r SET
        status = 'running',
        -- as claim_runs: 64 random bits (docs/storage.md)
        lease_token = uuid_hash_extended(gen_random_uuid(), 0),
        lease_owner = %(worker)s::text,
        lease_expires_at = perdure_now() + make_interval(secs => %(lease)s::double precision),
        available_at = perdure_now() + make_interval(secs => %(lease)s::double precision),
        started_at = coalesce(r.started_at, perdure_now()),
        wake_reason = NULL,
        claims_since_progress = r.claims_since_progress + 1,
        updated_at = perdure_now()
    FROM due
    WHERE r.id = due.id
    RETURNING r.*, due.status AS previous_status, due.lease_owner AS previous_owner
),
logged AS (
    INSERT INTO events (run_id, type, data)
    SELECT c.id, 'lease_expired', jsonb_build_object('worker', c.previous_owner)
    FROM claimed c
    WHERE c.previous_status = 'running'
    UNION ALL
    SELECT c.id, 'claimed',
           jsonb_build_object('worker', %(worker)s::text)
    FROM claimed c
),
woken AS (
    SELECT set_config('perdure.claim_on_complete', '', true) AS reset,
           CASE WHEN EXISTS (
                    SELECT 1 FROM runs r
                    WHERE r.parent_id = (SELECT e.flow_id FROM ended e)
                      AND r.kind = 'task' AND r.status = 'pending'
                      AND r.created_at = perdure_now()
                      AND r.id NOT IN (SELECT d.id FROM due d))
                THEN send_notice('w', (SELECT e.flow_id FROM ended e)) END AS woke
)
SELECT c.id, c.workflow, c.version, c.status, c.input, c.output, c.error, c.attempt,
       c.priority, c.parent_id, c.created_at, c.started_at, c.completed_at,
       NULL::timestamptz, c.deadline_at, c.idempotency_key, c.wake_reason, c.retention_days,
       c.updated_at, c.parent_step,
       c.lease_token, c.claims_since_progress, c.step_attempts,
       c.previous_status = 'running', perdure_now(),
       NULL::json, NULL::json,  -- a task just started has no journal and no waits
       c.traceparent
FROM woken w
LEFT JOIN claimed c ON true
ORDER BY c.priority, c.id

-- name: flow_state_keys
-- The task keys of a flow run's limited steps (a fork keeps them).
SELECT step, concurrency_key, fifo_key, rate_key FROM flow_states
WHERE run_id = %(run_id)s::text AND concurrency_key IS NOT NULL
ORDER BY step_index
