-- DAG flows on SQLite: shapes, flow runs, their step states and tasks (see
-- migrations/0004_flows.sql). Named blocks, loaded by _flows.py.

-- name: get_flow_version
-- A stored flow's options at one version.
SELECT name, version, max_attempts, base_delay, timeout, max_tasks FROM flows
WHERE name = :name AND version = :version

-- name: get_flow_latest
-- A stored flow's options at its highest version.
SELECT name, version, max_attempts, base_delay, timeout, max_tasks FROM flows
WHERE name = :name ORDER BY version DESC LIMIT 1

-- name: get_flow_steps
-- The steps of a flow version in definition order.
SELECT step, map_over, max_attempts, base_delay, timeout, concurrency, key_concurrency,
       rate_limit, rate_period, rate_keyed, fifo, max_tasks
FROM flow_steps
WHERE flow = :name AND version = :version ORDER BY step_index

-- name: get_flow_deps
-- The dependencies of a flow version's steps, in the order each step lists them.
SELECT step, dep FROM flow_deps
WHERE flow = :name AND version = :version ORDER BY step, dep_index

-- name: insert_flow
INSERT INTO flows (name, version, max_attempts, base_delay, timeout, max_tasks, created_at)
VALUES (:name, :version, :max_attempts, :base_delay, :timeout, :max_tasks, :now)

-- name: insert_flow_step
INSERT INTO flow_steps (flow, version, step, step_index, map_over, max_attempts,
                        base_delay, timeout, concurrency, key_concurrency, rate_limit,
                        rate_period, rate_keyed, fifo, max_tasks)
VALUES (:flow, :version, :step, :step_index, :map_over, :max_attempts, :base_delay, :timeout,
        :concurrency, :key_concurrency, :rate_limit, :rate_period, :rate_keyed, :fifo,
        :max_tasks)

-- name: insert_flow_dep
INSERT INTO flow_deps (flow, version, step, dep, dep_index)
VALUES (:flow, :version, :step, :dep, :dep_index)

-- name: mark_flow_run
-- A new run is a flow run: running from its start, never claimed itself.
UPDATE runs SET kind = 'flow', status = 'running', available_at = 1e18, started_at = :now
WHERE id = :id

-- name: run_kind
SELECT kind, workflow, version, status, input FROM runs WHERE id = :id

-- name: insert_flow_state
-- A step's state, with the flow-control keys of its tasks (NULL: not limited).
INSERT INTO flow_states (run_id, step, step_index, status, concurrency_key, fifo_key, rate_key)
VALUES (:run_id, :step, :step_index, 'created', :lane, :fifo, :rate)

-- name: flow_states
-- A flow run's step states in definition order.
SELECT step, status, task_count, remaining_tasks, output, error, started_at, completed_at,
       concurrency_key, fifo_key, rate_key
FROM flow_states WHERE run_id = :run_id ORDER BY step_index

-- name: start_flow_state
UPDATE flow_states SET status = 'started', task_count = :count, remaining_tasks = :count,
    started_at = :now
WHERE run_id = :run_id AND step = :step

-- name: complete_flow_state
UPDATE flow_states SET status = 'completed', output = :output, remaining_tasks = 0,
    started_at = coalesce(started_at, :now), completed_at = :now
WHERE run_id = :run_id AND step = :step

-- name: fail_flow_state
UPDATE flow_states SET status = 'failed', error = :error, completed_at = :now
WHERE run_id = :run_id AND step = :step

-- name: cancel_flow_states
-- A failed flow run's steps still under way are cancelled.
UPDATE flow_states SET status = 'cancelled', completed_at = :now
WHERE run_id = :run_id AND status = 'started'

-- name: task_done
-- One task of a started step completed: count it; returns what is left.
UPDATE flow_states SET remaining_tasks = remaining_tasks - 1
WHERE run_id = :run_id AND step = :step AND status = 'started'
RETURNING remaining_tasks

-- name: insert_task
-- A task of a flow step: a run of kind 'task', claimable now, with its step's keys.
INSERT INTO runs (
    id, workflow, version, status, input, attempt, priority, parent_id, parent_step,
    available_at, lease_token, retention_days, claims_since_progress, step_attempts,
    created_at, updated_at, kind, task_index, concurrency_key, fifo_key, rate_key
) VALUES (
    :id, :workflow, :version, 'pending', :input, 1, :priority, :parent_id, :step,
    :now, 0, :retention_days, 0, 0, :now, :now, 'task', :task_index, :lane, :fifo, :rate
)

-- name: task_created_event
INSERT INTO events (run_id, type, data, created_at)
VALUES (:id, 'created', json_object('workflow', :workflow, 'version', :version,
                                    'parent_id', :parent_id, 'task_index', :task_index), :now)

-- name: task_outputs
-- The outputs of a step's tasks in element order.
SELECT output FROM runs
WHERE parent_id = :run_id AND parent_step = :step AND kind = 'task'
ORDER BY task_index

-- name: task_row
SELECT id, parent_id, parent_step, task_index, kind FROM runs WHERE id = :id

-- name: flow_tasks
-- The tasks of a flow run (for its steps' view).
SELECT id, parent_step, task_index, status, attempt, output, error, started_at, completed_at
FROM runs
WHERE parent_id = :run_id AND kind = 'task'
ORDER BY parent_step, task_index

-- name: end_flow_run
-- End a flow run as completed or failed.
UPDATE runs SET status = :status, output = :output, error = :error, completed_at = :now,
    available_at = 1e18, wake_reason = NULL, updated_at = :now
WHERE id = :id AND status = 'running'

-- name: flow_run_row
-- What advancing a flow run needs of its row.
SELECT id, input, priority, retention_days FROM runs WHERE id = :id

-- name: completed_task
-- Claim on complete: the task a transition just completed under this token (its flow run).
SELECT parent_id FROM runs
WHERE id = :id AND lease_token = :token AND kind = 'task' AND status = 'completed'

-- name: claim_select_tasks
-- Claim on complete: the tasks of one flow run started by this transaction (at :now),
-- of the JSON list's pairs.
SELECT id, status, lease_owner
FROM runs
WHERE parent_id = :parent_id AND kind = 'task' AND status = 'pending'
    AND created_at = :now AND available_at <= :now
    AND (workflow, version) IN (
        SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
        FROM json_each(:pairs))
ORDER BY priority, available_at, id
LIMIT :limit

-- name: pending_tasks_left
-- Claim on complete: is a task this transaction started (at :now) still unclaimed?
SELECT 1 FROM runs
WHERE parent_id = :parent_id AND kind = 'task' AND status = 'pending' AND created_at = :now
LIMIT 1

-- name: tasks_to_rerun
-- A retried flow run's step whose input is kept: its tasks to run again in place, all (:all) or the unfinished ones.
SELECT id FROM runs
WHERE parent_id = :run_id AND parent_step = :step AND kind = 'task'
  AND (:all OR status <> 'completed')
ORDER BY task_index

-- name: rerun_task
-- A task of a retried flow run runs again under its id: pending now, with its attempts afresh.
UPDATE runs SET
    status = 'pending', attempt = 1, output = NULL, error = NULL, lease_owner = NULL,
    lease_expires_at = NULL, available_at = :now, started_at = NULL, completed_at = NULL,
    wake_reason = NULL, claims_since_progress = 0, step_attempts = 0, updated_at = :now
WHERE id = :id

-- name: restart_flow_state
-- A retried flow run's step whose tasks run again in place: started, :count of them left.
UPDATE flow_states SET status = 'started', remaining_tasks = :count, output = NULL,
    error = NULL, started_at = :now, completed_at = NULL
WHERE run_id = :run_id AND step = :step

-- name: drop_step_tasks
-- A retried flow run's step whose input changes: its old tasks go (new ones come when it is ready).
DELETE FROM runs WHERE parent_id = :run_id AND parent_step = :step AND kind = 'task'

-- name: recreate_flow_state
-- A retried flow run's step whose input changes: created again, waiting for its dependencies.
UPDATE flow_states SET status = 'created', task_count = 0, remaining_tasks = 0, output = NULL,
    error = NULL, started_at = NULL, completed_at = NULL
WHERE run_id = :run_id AND step = :step

-- name: reopen_flow_run
-- A retried flow run is running again (never claimed itself) with its next attempt.
UPDATE runs SET
    status = 'running', attempt = attempt + 1, output = NULL, error = NULL,
    completed_at = NULL, available_at = 1e18, wake_reason = NULL, updated_at = :now
WHERE id = :id

-- name: note_fork
-- A fork of a flow run: its created event says where it came from (:origin, a JSON object).
UPDATE events SET data = json_patch(coalesce(data, '{}'), :origin)
WHERE run_id = :id AND type = 'created'
