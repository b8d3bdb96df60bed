-- Named queries of the SQLite backend (perdure.backends.sqlite.backend).
-- Times are REAL Unix seconds bound by the backend (its clock), JSON is TEXT.
-- Run rows are always selected with the same column list, read by name.

-- name: create_schema_version
-- Create the schema_version table if it is missing (before reading the version).
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    applied_at  REAL NOT NULL
)

-- name: current_schema_version
-- The highest applied migration (0 on an empty database).
SELECT COALESCE(MAX(version), 0) AS version FROM schema_version

-- name: insert_schema_version
-- Record one applied migration.
INSERT INTO schema_version (version, applied_at) VALUES (:version, :now)

-- name: create_clock
-- The clock's offset from real time, one row, made before the migrations like schema_version.
CREATE TABLE IF NOT EXISTS clock (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    offset_seconds REAL NOT NULL
)

-- name: init_clock
-- The clock starts at real time.
INSERT OR IGNORE INTO clock (id, offset_seconds) VALUES (1, 0.0)

-- name: clock_table_exists
-- Whether the file has its clock table yet.
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'clock'

-- name: clock_offset
-- How far the database clock runs ahead of real time, in seconds.
SELECT offset_seconds FROM clock WHERE id = 1

-- name: set_clock_offset
-- Move the database clock.
UPDATE clock SET offset_seconds = :offset WHERE id = 1

-- name: upsert_workflow
-- Register (or refresh) one workflow definition.
INSERT INTO workflows (name, version, options, registered_at)
VALUES (:name, :version, :options, :now)
ON CONFLICT (name, version) DO UPDATE SET
    options = excluded.options,
    registered_at = excluded.registered_at

-- name: get_workflow_version
-- One registered version of a workflow.
SELECT name, version, options FROM workflows WHERE name = :name AND version = :version

-- name: get_workflow_latest
-- The highest registered version of a workflow.
SELECT name, version, options FROM workflows
WHERE name = :name
ORDER BY version DESC
LIMIT 1

-- name: insert_run
-- Insert a pending run unless its id or (workflow, idempotency key) exists; returns it.
INSERT INTO runs (
    id, workflow, version, status, input, attempt, priority, idempotency_key,
    parent_id, parent_step, available_at, lease_token, deadline_at, retention_days,
    claims_since_progress, step_attempts, created_at, updated_at, traceparent,
    concurrency_key, fifo_key, rate_key, debounce_key
) VALUES (
    :id, :workflow, :version, 'pending', :input, 1, :priority, :idempotency_key,
    :parent_id, :parent_step, :available_at, 0, :deadline_at, :retention_days,
    0, 0, :now, :now, :traceparent,
    :concurrency_key, :fifo_key, :rate_key, :debounce_key
)
ON CONFLICT DO NOTHING
RETURNING
    {{_run_columns}}

-- name: _run_columns
-- (a part) The columns of a run, as to_run() reads them.
id, workflow, version, status, input, output, error, attempt, priority,
idempotency_key, parent_id, parent_step, available_at, wake_reason, deadline_at,
retention_days, lease_token, claims_since_progress, step_attempts,
created_at, started_at, updated_at, completed_at

-- name: _run_filters
-- (a part) The optional filters of a listing, newest first (after the cursor).
AND (:status IS NULL OR status = :status)
AND (:since IS NULL OR created_at >= :since)
AND (:until IS NULL OR created_at < :until)
AND (:parent_id IS NULL OR parent_id = :parent_id)
AND (kind <> 'task' OR :parent_id IS NOT NULL OR :include_tasks = 1)  -- a flow's tasks: under their run
AND (:input_match IS NULL OR json_contains(input, :input_match))
AND (:top_level = 0 OR parent_id IS NULL)
AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
ORDER BY created_at DESC, id DESC
LIMIT :limit

-- name: get_run
-- One run by id.
SELECT
    {{_run_columns}}
FROM runs
WHERE id = :id

-- name: get_run_by_key
-- The run of a workflow holding an idempotency key.
SELECT
    {{_run_columns}}
FROM runs
WHERE workflow = :workflow AND idempotency_key = :idempotency_key

-- name: get_run_state
-- The few columns of a run that producers' decisions need (no JSON read).
SELECT id, status, parent_id, parent_step, created_at FROM runs WHERE id = :id

-- name: insert_event
-- Add one audit-trail entry.
INSERT INTO events (run_id, type, data, created_at) VALUES (:run_id, :type, :data, :now)

-- name: live_descendants
-- The live children of a run and, recursively, theirs (ids).
WITH RECURSIVE tree (id) AS (
    SELECT id FROM runs
    WHERE parent_id = :id AND status IN ('pending', 'waiting', 'running')
    UNION
    SELECT child.id
    FROM runs AS child
    JOIN tree ON child.parent_id = tree.id
    WHERE child.status IN ('pending', 'waiting', 'running')
)
SELECT id FROM tree

-- name: cancel_runs
-- End the runs of a JSON id list as cancelled and clear their leases.
UPDATE runs SET
    status = 'cancelled',
    completed_at = :now,
    updated_at = :now,
    available_at = 1e18,
    lease_owner = NULL,
    lease_expires_at = NULL,
    wake_reason = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
    AND status IN ('pending', 'waiting', 'running')

-- name: delete_waits_of_runs
-- Delete every wait of the runs of a JSON id list.
DELETE FROM waits WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: delete_signals_of_runs
-- Delete every buffered signal of the runs of a JSON id list.
DELETE FROM signals WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: upsert_step
-- Write a journal row (final rows stay; a replaced retrying row moves to the end).
INSERT INTO steps (
    run_id, key, kind, status, output, error, attempts,
    started_at, completed_at, recorded_at, event_mark
) VALUES (
    :run_id, :key, :kind, :status, :output, :error, :attempts,
    :started_at, :completed_at, :now, (SELECT COALESCE(MAX(id), 0) FROM events)
)
ON CONFLICT (run_id, key) DO UPDATE SET
    seq = (SELECT MAX(seq) + 1 FROM steps),
    kind = excluded.kind,
    status = excluded.status,
    output = excluded.output,
    error = excluded.error,
    attempts = excluded.attempts,
    started_at = excluded.started_at,
    completed_at = excluded.completed_at,
    recorded_at = excluded.recorded_at,
    event_mark = excluded.event_mark
WHERE steps.status = 'retrying'

-- name: get_step
-- One journal row.
SELECT key, kind, status, output, error, attempts, started_at, completed_at
FROM steps
WHERE run_id = :run_id AND key = :key

-- name: final_step_exists
-- 1 if the run's journal has a completed or failed row for the key.
SELECT 1 FROM steps WHERE run_id = :run_id AND key = :key AND status <> 'retrying'

-- name: delete_wait
-- Delete the run's wait on one key.
DELETE FROM waits WHERE run_id = :run_id AND key = :key

-- name: wake_run
-- Make a pending or waiting run claimable now (a running run is left alone).
UPDATE runs SET available_at = :now, updated_at = :now
WHERE id = :id AND status IN ('pending', 'waiting')

-- name: find_wait_for_signal
-- The run's oldest wait on an event whose match the payload contains.
SELECT key, created_at FROM waits
WHERE run_id = :run_id
    AND event = :event
    AND (match IS NULL OR json_contains(:payload, match))
ORDER BY created_at, rowid
LIMIT 1

-- name: insert_signal
-- Buffer a signal for a live run.
INSERT INTO signals (run_id, event, payload, created_at)
VALUES (:run_id, :event, :payload, :now)

-- name: get_signal_key
-- What a signal with this idempotency key answered when the run first got it.
SELECT outcome FROM signal_keys WHERE run_id = :run_id AND key = :key

-- name: insert_signal_key
-- Remember a signal's idempotency key and its answer.
INSERT INTO signal_keys (run_id, key, outcome, created_at) VALUES (:run_id, :key, :outcome, :now)

-- name: get_published
-- The recorded result of an earlier publish with this idempotency key.
SELECT result FROM published WHERE key = :key

-- name: insert_published
-- Record a publish result under its idempotency key.
INSERT INTO published (key, result, created_at) VALUES (:key, :result, :now)

-- name: find_waits_for_event
-- Waits of live runs on an event whose match the payload contains, oldest first per run.
SELECT w.run_id, w.key, w.created_at, r.status
FROM waits AS w
JOIN runs AS r ON r.id = w.run_id
WHERE w.event = :event
    AND r.status IN ('pending', 'waiting', 'running')
    AND (w.match IS NULL OR json_contains(:payload, w.match))
ORDER BY w.run_id, w.created_at, w.rowid

-- name: matching_subscriptions
-- Workflows subscribed to a pattern matching the event name (only * is a wildcard).
SELECT DISTINCT workflow
FROM subscriptions
WHERE :event GLOB replace(replace(pattern, '[', '[[]'), '?', '[?]')  -- quote GLOB's [ and ?
ORDER BY workflow

-- name: insert_subscription
-- Add a subscription (no-op if it exists).
INSERT INTO subscriptions (pattern, workflow, created_at)
VALUES (:pattern, :workflow, :now)
ON CONFLICT (pattern, workflow) DO NOTHING

-- name: delete_subscription
-- Remove a subscription.
DELETE FROM subscriptions WHERE pattern = :pattern AND workflow = :workflow

-- name: list_subscriptions
-- Every subscription, sorted.
SELECT pattern, workflow FROM subscriptions ORDER BY pattern, workflow

-- name: list_runs
-- Runs matching optional filters after the cursor (:after_at, :after_id), newest first.
SELECT
    {{_run_columns}}
FROM runs INDEXED BY runs_created_idx
WHERE (created_at, id) < (:after_at, :after_id)
    {{_run_filters}}

-- name: list_runs_of_workflow
-- Runs of one workflow matching optional filters, as list_runs.
SELECT
    {{_run_columns}}
FROM runs INDEXED BY runs_workflow_idx
WHERE workflow = :workflow
    AND (created_at, id) < (:after_at, :after_id)
    {{_run_filters}}

-- name: get_steps
-- A run's journal in write order.
SELECT key, kind, status, output, error, attempts, started_at, completed_at
FROM steps
WHERE run_id = :run_id
ORDER BY seq

-- name: get_events
-- A run's stored events merged with step_completed (or value) entries from the journal.
SELECT type, data, created_at, id AS mark, 0 AS part, 0 AS seq
FROM events
WHERE run_id = :run_id
UNION ALL
SELECT
    CASE WHEN s.key LIKE '~set:%' THEN 'value' ELSE 'step_completed' END,
    CASE WHEN s.key LIKE '~set:%' THEN s.output
         ELSE json_object('step', s.key, 'kind', s.kind) END,
    -- a sleep's row is written when it is scheduled (sleep_started): it completes at
    -- its due time, once that has passed (:now), unless the run ended first
    CASE WHEN s.kind = 'sleep' THEN coalesce(s.completed_at, s.recorded_at)
         ELSE s.recorded_at END,
    s.event_mark, 1, s.seq
FROM steps s
WHERE s.run_id = :run_id AND s.status = 'completed'
  AND (s.kind <> 'sleep' OR s.completed_at IS NULL
       OR (s.completed_at <= :now
           AND NOT EXISTS (SELECT 1 FROM runs r
                           WHERE r.id = s.run_id AND r.completed_at < s.completed_at)))
ORDER BY created_at, mark, part, seq

-- name: workflow_summaries
-- Run counts per (workflow, status), plus every registered name (status NULL).
SELECT workflow AS name, status, COUNT(*) AS n FROM runs WHERE kind <> 'task'
GROUP BY workflow, status
UNION ALL
SELECT DISTINCT name, NULL, 0 FROM workflows
UNION ALL
SELECT DISTINCT name, NULL, 0 FROM flows

-- name: upsert_worker
-- Register a worker (or refresh it), seen now.
INSERT INTO workers (
    id, host, pid, workflows, concurrency, started_at, last_seen_at, stopped_at
) VALUES (
    :id, :host, :pid, :workflows, :concurrency, :started_at, :now, NULL
)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    workflows = excluded.workflows,
    concurrency = excluded.concurrency,
    started_at = excluded.started_at,
    last_seen_at = excluded.last_seen_at,
    stopped_at = NULL

-- name: stop_worker
-- Mark a worker stopped.
UPDATE workers SET stopped_at = :now WHERE id = :id

-- name: touch_worker
-- Note that a worker is alive.
UPDATE workers SET last_seen_at = :now WHERE id = :id

-- name: list_workers
-- Workers seen since a time, newest first.
SELECT id, host, pid, workflows, concurrency, started_at, last_seen_at, stopped_at
FROM workers
WHERE last_seen_at >= :since
ORDER BY last_seen_at DESC, id

-- name: claim_select
-- Due runs of the JSON list's (workflow, version) pairs or of their names without a version.
SELECT id, status, lease_owner
FROM runs INDEXED BY runs_claim_idx
WHERE status IN ('pending', 'waiting', 'running')
    AND available_at <= :now
    AND ((workflow, version) IN (
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
            FROM json_each(:pairs))
        OR (version IS NULL AND workflow IN (
            SELECT json_extract(value, '$[0]') FROM json_each(:pairs))))
ORDER BY priority, available_at, id
LIMIT :limit

-- name: claim_update
-- Lease the runs of a JSON id list to a worker (fixing a missing version); returns them.
UPDATE runs SET
    status = 'running',
    version = COALESCE(version, (
        SELECT max(json_extract(value, '$[1]')) FROM json_each(:pairs)
        WHERE json_extract(value, '$[0]') = runs.workflow)),
    -- 64 random bits (_claims.new_lease_token; see docs/storage.md).
    lease_token = new_lease_token(),
    lease_owner = :worker,
    lease_expires_at = :expires,
    available_at = :expires,
    started_at = COALESCE(started_at, :now),
    wake_reason = NULL,
    claims_since_progress = claims_since_progress + 1,
    updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING
    {{_run_columns}}, traceparent, call_order

-- name: handed_before
-- The tasks that a committed end of task :id (:token) leased to :worker, still its own.
SELECT
    {{_run_columns}}, traceparent
FROM runs
WHERE parent_id = (SELECT t.parent_id FROM runs t
                   WHERE t.id = :id AND t.lease_token = :token AND t.kind = 'task'
                     AND t.status = 'completed')
  AND kind = 'task' AND status = 'running' AND lease_owner = :worker
  AND updated_at = (SELECT t.completed_at FROM runs t WHERE t.id = :id)
  AND lease_expires_at > :now
ORDER BY priority, id

-- name: handed_at_start
-- What a committed start of the new run :id leased to :worker at its creation, still its own: the run or its first tasks.
SELECT
    {{_run_columns}}, traceparent
FROM runs
WHERE ((id = :id AND kind = 'workflow') OR (parent_id = :id AND kind = 'task'))
  AND status = 'running' AND lease_owner = :worker
  AND updated_at = (SELECT f.created_at FROM runs f WHERE f.id = :id)
  AND lease_expires_at > :now
ORDER BY priority, id

-- name: claim_journals
-- The journals of the runs of a JSON id list, each in write order.
SELECT run_id, key, kind, status, output, error, attempts, started_at, completed_at
FROM steps
WHERE run_id IN (SELECT value FROM json_each(:ids))
ORDER BY run_id, seq

-- name: claim_waits
-- The open waits of the runs of a JSON id list, oldest first.
SELECT run_id, key, event, match, timeout_at
FROM waits
WHERE run_id IN (SELECT value FROM json_each(:ids))
ORDER BY run_id, created_at, rowid

-- name: extend_lease
-- Renew one lease if the run is still running under the token.
UPDATE runs SET lease_expires_at = :expires, available_at = :expires
WHERE id = :id AND lease_token = :token AND status = 'running'

-- name: release_orphan_candidates
-- Runs leased to this worker (it filters out the ones it holds).
SELECT id FROM runs WHERE status = 'running' AND lease_owner = :worker

-- name: release_orphan
-- Make one run leased to this worker claimable now.
UPDATE runs SET lease_expires_at = :now, available_at = :now
WHERE id = :id AND status = 'running' AND lease_owner = :worker

-- name: fence_run
-- The fence of a transition: count its progress if the run is still held; returns it.
UPDATE runs SET
    step_attempts = step_attempts + :step_attempts,
    claims_since_progress = 0,
    updated_at = :now,
    -- the steps first asked in the pass (a JSON list, or NULL: none), appended
    call_order = CASE WHEN :asked IS NULL THEN call_order ELSE (
        SELECT json_group_array(o.value) FROM (
            SELECT 0 AS part, c.key, c.value FROM json_each(runs.call_order) c
            UNION ALL
            SELECT 1, a.key, a.value FROM json_each(:asked) a
            ORDER BY part, key) o) END
WHERE id = :id AND lease_token = :token AND status = 'running'
RETURNING parent_id, parent_step, deadline_at, created_at

-- name: insert_wait
-- Register a wait unless the run already has one on the key or a final row for it.
INSERT INTO waits (run_id, key, event, match, timeout_at, created_at)
SELECT :run_id, :key, :event, :match, :timeout_at, :now
WHERE NOT EXISTS (
    SELECT 1 FROM steps WHERE run_id = :run_id AND key = :key AND status <> 'retrying'
)
ON CONFLICT (run_id, key) DO NOTHING

-- name: run_waits
-- The open waits of one run, oldest first.
SELECT key, event, match, timeout_at, created_at
FROM waits
WHERE run_id = :run_id
ORDER BY created_at, rowid

-- name: find_buffered_signal
-- The run's oldest buffered signal on an event whose payload contains the match.
SELECT id, payload FROM signals
WHERE run_id = :run_id
    AND event = :event
    AND (:match IS NULL OR json_contains(payload, :match))
ORDER BY id
LIMIT 1

-- name: delete_signal
-- Consume one buffered signal.
DELETE FROM signals WHERE id = :id

-- name: park_run
-- Park a held run: waiting, lease cleared, claimable at :available_at.
UPDATE runs SET
    status = 'waiting',
    wake_reason = :reason,
    available_at = :available_at,
    error = coalesce(:error, error),
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now
WHERE id = :id

-- name: finish_run
-- End a held run as completed or failed, lease cleared.
UPDATE runs SET
    status = :status,
    output = :output,
    error = :error,
    completed_at = :now,
    available_at = 1e18,
    wake_reason = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now
WHERE id = :id

-- name: delete_run_waits
-- Delete every wait of one run.
DELETE FROM waits WHERE run_id = :run_id

-- name: delete_run_signals
-- Delete every buffered signal of one run.
DELETE FROM signals WHERE run_id = :run_id

-- name: retry_run
-- Schedule a held run's next workflow attempt.
UPDATE runs SET
    status = 'waiting',
    wake_reason = 'retry',
    attempt = attempt + 1,
    error = :error,
    available_at = :available_at,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now
WHERE id = :id

-- name: reopen_steps
-- A workflow retry: the failed steps of a JSON key list run again with a fresh budget.
UPDATE steps SET status = 'retrying', attempts = 0
WHERE run_id = :run_id AND status = 'failed' AND key IN (SELECT value FROM json_each(:keys))

-- name: release_run
-- Give a held run back, claimable now.
UPDATE runs SET
    status = 'waiting',
    wake_reason = NULL,
    available_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now
WHERE id = :id

-- name: next_wake_at
-- The earliest due time of any live run of the JSON list's pairs (or names, no version).
SELECT MIN(available_at) AS at
FROM runs INDEXED BY runs_claim_idx
WHERE status IN ('pending', 'waiting', 'running')
    AND ((workflow, version) IN (
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
            FROM json_each(:pairs))
        OR (version IS NULL AND workflow IN (
            SELECT json_extract(value, '$[0]') FROM json_each(:pairs))))

-- name: sweep_runs
-- Delete up to :limit ended runs past their retention (children rows cascade).
DELETE FROM runs
WHERE id IN (
    SELECT id FROM runs INDEXED BY runs_retention_idx
    WHERE status IN ('completed', 'failed', 'cancelled')
        AND completed_at <= :now
        AND completed_at + 86400.0 * MIN(retention_days, :max_days) <= :now
    ORDER BY completed_at
    LIMIT :limit
)

-- name: sweep_published
-- Forget publish idempotency keys older than the longest retention.
DELETE FROM published WHERE created_at < :before

-- name: sweep_workers
-- Forget workers not seen for longer than the longest retention.
DELETE FROM workers WHERE last_seen_at < :before

-- name: defer_select
-- Due runs of the served workflow names whose version is not among the served pairs.
SELECT id, version
FROM runs INDEXED BY runs_claim_idx
WHERE status IN ('pending', 'waiting', 'running')
    AND available_at <= :cutoff
    AND workflow IN (SELECT value FROM json_each(:names))
    AND version IS NOT NULL
    AND (workflow, version) NOT IN (
        SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
        FROM json_each(:pairs)
    )
ORDER BY available_at, id
LIMIT :limit

-- name: count_version_unavailable
-- How many times a run was already deferred for want of its version.
SELECT count(*) AS n FROM events WHERE run_id = :id AND type = 'version_unavailable'

-- name: defer_update
-- Park one run until a worker with its version may be up.
UPDATE runs SET
    status = 'waiting',
    wake_reason = 'version',
    lease_owner = NULL,
    lease_expires_at = NULL,
    available_at = :available_at,
    updated_at = :now
WHERE id = :id

-- name: count_undecodable
-- How many times workers could not open the run's sealed values (its backoff).
SELECT count(*) AS n FROM events WHERE run_id = :id AND type = 'undecodable'

-- name: park_undecodable
-- Park a claimed run whose sealed values its worker cannot open, if it still holds it.
UPDATE runs SET
    status = 'waiting',
    wake_reason = 'undecodable',
    lease_owner = NULL,
    lease_expires_at = NULL,
    claims_since_progress = 0,
    available_at = :available_at,
    updated_at = :now
WHERE id = :id AND lease_token = :token AND status = 'running'
RETURNING available_at

-- name: step_seq
-- The write position of one journal row.
SELECT seq FROM steps WHERE run_id = :run_id AND key = :key

-- name: first_failed_seq
-- The write position of the run's first failed journal row (NULL: none failed).
SELECT min(seq) AS seq FROM steps WHERE run_id = :run_id AND status = 'failed'

-- name: supersede_steps
-- Keep the rows a retry supersedes (from :from_seq on, and every rollback row) as history.
INSERT INTO superseded_steps (run_id, key, seq, kind, status, output, error, attempts,
                              started_at, completed_at, recorded_at, attempt, superseded_at)
SELECT run_id, key, seq, kind, status, output, error, attempts, started_at, completed_at,
       recorded_at, :attempt, :now
FROM steps
WHERE run_id = :run_id AND (seq >= :from_seq OR kind = 'rollback')
RETURNING key, seq

-- name: delete_superseded
-- Take the rows a retry superseded out of the journal.
DELETE FROM steps WHERE run_id = :run_id AND (seq >= :from_seq OR kind = 'rollback')

-- name: cut_call_order
-- Before a retry supersedes rows from :from_seq on: cut the call order where they begin.
UPDATE runs SET call_order = (
    SELECT json_group_array(o.value) FROM (
        SELECT c.value FROM json_each(runs.call_order) c
        WHERE c.value NOT LIKE 'rollback:%'
          AND c.key < coalesce((
              SELECT min(x.key) FROM json_each(runs.call_order) x
              JOIN steps s ON s.run_id = runs.id AND s.seq = :from_seq
              WHERE x.value = s.kind || ':' || s.key), 1e18)
        ORDER BY c.key) o)
WHERE id = :id

-- name: drop_waits
-- Drop a run's registered waits (a diverged run that is retried).
DELETE FROM waits WHERE run_id = :run_id

-- name: reset_for_retry
-- A failed or cancelled run is pending again with its next attempt.
UPDATE runs SET
    status = 'pending', attempt = attempt + 1, output = NULL, error = NULL,
    completed_at = NULL, available_at = :now, wake_reason = NULL, lease_owner = NULL,
    lease_expires_at = NULL, claims_since_progress = 0, updated_at = :now
WHERE id = :id
RETURNING
    {{_run_columns}}

-- name: copy_journal
-- Copy a run's final rows before :before_seq (NULL: all) to a new run, in order.
INSERT INTO steps (run_id, key, kind, status, output, error, attempts, started_at,
                   completed_at, recorded_at, event_mark)
SELECT :new_id, key, kind, status, output, error, attempts, started_at, completed_at,
       :now, (SELECT COALESCE(MAX(id), 0) FROM events)
FROM steps
WHERE run_id = :source_id AND status <> 'retrying' AND kind <> 'rollback'
    AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq

-- name: get_call_order
-- The steps a run's body asked for, in the order it first asked ('kind:key', JSON).
SELECT call_order FROM runs WHERE id = :run_id

-- name: get_steps_with_superseded
-- A run's journal and superseded rows in write order (seqs of removed rows are reused).
SELECT seq, key, kind, status, output, error, attempts, started_at, completed_at,
       recorded_at, 0 AS superseded
FROM steps WHERE run_id = :run_id
UNION ALL
SELECT seq, key, kind, status, output, error, attempts, started_at, completed_at,
       recorded_at, 1 AS superseded
FROM superseded_steps WHERE run_id = :run_id
ORDER BY recorded_at, seq

-- name: drop_sibling_waits
-- The other waits of a wait for the first of several events (keys '<step>@<event>').
DELETE FROM waits WHERE run_id = :run_id AND substr(key, 1, :n) = :prefix AND key <> :key
RETURNING key

-- name: completed_run_step
-- Whether a run has a completed step (one whose rollback may have to run).
SELECT 1 FROM steps WHERE run_id = :run_id AND kind = 'run' AND status = 'completed' LIMIT 1

-- name: hand_to_rollback
-- A run cancelled with rollback: claimable now for its rollback pass, the lease taken away.
UPDATE runs SET
    status = 'waiting', available_at = :now, wake_reason = NULL, lease_owner = NULL,
    lease_expires_at = NULL, claims_since_progress = 0, error = :error, updated_at = :now
WHERE id = :id

-- name: rollback_steps
-- A run's rollback rows (completed or failed), oldest first.
SELECT key, status FROM steps
WHERE run_id = :run_id AND kind = 'rollback' AND status IN ('completed', 'failed')
ORDER BY seq

-- name: set_run_error
-- Replace a run's error.
UPDATE runs SET error = :error WHERE id = :id

-- name: queue_gauges
-- Per workflow with live runs: running, due, the oldest due one's wait, pending, waiting.
SELECT workflow,
       sum(status = 'running') AS running,
       sum(status <> 'running' AND available_at <= :now) AS due,
       coalesce(:now - min(CASE WHEN status <> 'running' AND available_at <= :now
                                THEN available_at END), 0.0) AS lag,
       sum(status = 'pending') AS pending,
       sum(status = 'waiting') AS waiting
FROM runs
WHERE status IN ('pending', 'waiting', 'running')
GROUP BY workflow
ORDER BY workflow

-- name: debounce_run
-- The pending run of a debounce key takes a later start's input and keys and is pushed back.
UPDATE runs SET
    input = :input,
    available_at = :available_at,
    concurrency_key = :concurrency_key,
    fifo_key = :fifo_key,
    rate_key = :rate_key,
    updated_at = :now
WHERE workflow = :workflow AND debounce_key = :debounce_key AND status = 'pending'
RETURNING
    {{_run_columns}}

-- name: claim_select_limited
-- claim_select under flow-control limits (as PostgreSQL's claim_runs_limited; see docs/flow-control.md).
WITH RECURSIVE served(workflow, version) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs)
),
lim(workflow, concurrency, key_concurrency, rate, period, fifo) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
           json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]')
    FROM json_each(:limits)
),
lane_walk(workflow, lane) AS (
    SELECT l.workflow,
           (SELECT r.concurrency_key FROM runs r INDEXED BY runs_lane_idx
            WHERE r.workflow = l.workflow AND r.status IN ('pending', 'waiting', 'running')
              AND r.concurrency_key IS NOT NULL
            ORDER BY r.concurrency_key LIMIT 1)
    FROM lim l
    UNION ALL
    SELECT w.workflow,
           (SELECT r.concurrency_key FROM runs r INDEXED BY runs_lane_idx
            WHERE r.workflow = w.workflow AND r.status IN ('pending', 'waiting', 'running')
              AND r.concurrency_key > w.lane
            ORDER BY r.concurrency_key LIMIT 1)
    FROM lane_walk w
    WHERE w.lane IS NOT NULL
),
lane_runs AS (
    SELECT r.id, r.workflow, r.concurrency_key AS lane, r.status, r.priority, r.available_at,
           r.created_at, r.fifo_key, r.rate_key, r.started_at,
           row_number() OVER w AS lane_rank
    FROM lane_walk k
    JOIN runs r ON r.id IN (
        SELECT x.id FROM runs x INDEXED BY runs_lane_idx
        WHERE x.workflow = k.workflow AND x.concurrency_key = k.lane
          AND x.status IN ('pending', 'waiting', 'running') AND x.status <> 'running'
          AND x.available_at <= :now
          AND (x.version IS NULL
               OR (x.workflow, x.version) IN (SELECT workflow, version FROM served))
        ORDER BY x.priority, x.available_at, x.id
        LIMIT :limit)
    WHERE k.lane IS NOT NULL
    WINDOW w AS (PARTITION BY r.workflow, r.concurrency_key
                 ORDER BY r.priority, r.available_at, r.id)
),
by_lane AS (
    SELECT o.*, l.concurrency, l.rate, l.period, l.fifo
    FROM lane_runs o
    JOIN lim l ON l.workflow = o.workflow
    WHERE (l.key_concurrency IS NULL
           OR (SELECT count(*) FROM runs x INDEXED BY runs_lane_running_idx
               WHERE x.workflow = o.workflow AND x.concurrency_key = o.lane
                 AND x.status = 'running') + o.lane_rank <= l.key_concurrency)
),
by_fifo AS (
    SELECT b.*
    FROM by_lane b
    WHERE NOT b.fifo OR b.fifo_key IS NULL
       OR NOT EXISTS (
            SELECT 1 FROM runs o INDEXED BY runs_fifo_idx
            WHERE o.workflow = b.workflow AND o.fifo_key = b.fifo_key
              AND o.status IN ('pending', 'waiting', 'running') AND o.id <> b.id
              AND ((o.created_at, o.id) < (b.created_at, b.id) OR o.status = 'running'))
),
by_rate AS (
    SELECT f.* FROM (
        SELECT b.*,
               (SELECT count(*) FROM runs x INDEXED BY runs_rate_idx
                WHERE x.workflow = b.workflow AND x.rate_key = b.rate_key
                  AND x.started_at IS NOT NULL AND x.started_at > :now - b.period) AS used,
               sum(CASE WHEN b.started_at IS NULL THEN 1 ELSE 0 END) OVER (
                   PARTITION BY b.workflow, b.rate_key
                   ORDER BY b.priority, b.lane_rank, b.available_at, b.id) AS rate_new
        FROM by_fifo b
    ) f
    WHERE f.rate IS NULL OR f.rate_key IS NULL OR f.started_at IS NOT NULL
       OR f.used + f.rate_new <= f.rate
),
admitted AS (
    SELECT a.id, a.status, a.priority, a.lane_rank, a.available_at FROM (
        SELECT r.*,
               (SELECT count(*) FROM runs x INDEXED BY runs_lane_running_idx
                WHERE x.workflow = r.workflow AND x.concurrency_key IS NOT NULL
                  AND x.status = 'running') AS wf_running,
               row_number() OVER (
                   PARTITION BY r.workflow
                   ORDER BY r.priority, r.lane_rank, r.available_at, r.id) AS wf_new
        FROM by_rate r
    ) a
    WHERE a.concurrency IS NULL OR a.wf_running + a.wf_new <= a.concurrency
),
recovered AS (
    SELECT r.id, r.status, r.priority, 0 AS lane_rank, r.available_at
    FROM runs r INDEXED BY runs_lane_running_idx
    WHERE r.workflow IN (SELECT l.workflow FROM lim l)
      AND r.status = 'running' AND r.concurrency_key IS NOT NULL
      AND r.available_at <= :now
      AND (r.workflow, r.version) IN (SELECT workflow, version FROM served)
),
plain AS (
    SELECT r.id, r.status, r.priority, 1 AS lane_rank, r.available_at
    FROM runs r INDEXED BY runs_claim_idx
    WHERE :plain
      AND r.status IN ('pending', 'waiting', 'running')
      AND r.available_at <= :now
      AND ((r.workflow, r.version) IN (SELECT workflow, version FROM served)
           OR (r.version IS NULL AND r.workflow IN (SELECT workflow FROM served)))
      AND r.workflow NOT IN (SELECT l.workflow FROM lim l)
    ORDER BY r.priority, r.available_at, r.id
    LIMIT :limit
),
stray AS (
    SELECT q.id, q.status, q.priority, 1 AS lane_rank, q.available_at
    FROM (
        SELECT r.id, r.status, r.priority, r.available_at, r.concurrency_key, r.workflow
        FROM runs r INDEXED BY runs_claim_idx
        WHERE r.status IN ('pending', 'waiting', 'running')
          AND r.available_at <= :now
          AND ((r.workflow, r.version) IN (SELECT workflow, version FROM served)
               OR (r.version IS NULL AND r.workflow IN (SELECT workflow FROM served)))
        ORDER BY r.priority, r.available_at, r.id
        LIMIT :scan
    ) q
    WHERE q.concurrency_key IS NULL AND q.workflow IN (SELECT l.workflow FROM lim l)
)
SELECT c.id, c.status, r.lease_owner
FROM (SELECT * FROM recovered UNION ALL SELECT * FROM admitted UNION ALL SELECT * FROM plain
      UNION ALL SELECT * FROM stray) c
JOIN runs r ON r.id = c.id
ORDER BY c.priority, c.lane_rank, c.available_at, c.id
LIMIT :limit

-- name: put_schedule
-- Insert or update a schedule; an unchanged cron, zone and workflow keep next_at and paused.
INSERT INTO schedules (name, workflow, cron, input, timezone, catch_up, paused, next_at,
                       created_at, updated_at)
VALUES (:name, :workflow, :cron, :input, :timezone, :catch_up, 0, :next_at, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    input = excluded.input,
    catch_up = excluded.catch_up,
    next_at = CASE WHEN cron = excluded.cron AND timezone = excluded.timezone
                        AND workflow = excluded.workflow
                   THEN next_at ELSE excluded.next_at END,
    cron = excluded.cron,
    timezone = excluded.timezone,
    workflow = excluded.workflow,
    updated_at = excluded.updated_at
RETURNING name, workflow, cron, timezone, catch_up, paused, next_at, input, last_fired_at,
          created_at

-- name: get_schedule
-- One schedule by name.
SELECT name, workflow, cron, timezone, catch_up, paused, next_at, input, last_fired_at, created_at
FROM schedules WHERE name = :name

-- name: list_schedules
-- Every schedule, by name.
SELECT name, workflow, cron, timezone, catch_up, paused, next_at, input, last_fired_at, created_at
FROM schedules ORDER BY name

-- name: pause_schedule
-- Pause or resume a schedule (resuming a paused one sets next_at).
UPDATE schedules SET
    paused = :paused,
    next_at = CASE WHEN paused THEN coalesce(:next_at, next_at) ELSE next_at END,
    updated_at = :now
WHERE name = :name

-- name: delete_schedule
-- Delete a schedule.
DELETE FROM schedules WHERE name = :name

-- name: due_schedules
-- Schedules not paused whose next tick is past, earliest first.
SELECT name, workflow, cron, timezone, catch_up, paused, next_at, input, last_fired_at, created_at
FROM schedules WHERE paused = 0 AND next_at <= :now ORDER BY next_at LIMIT :limit

-- name: advance_schedule
-- Move next_at on if no other process did first (compare-and-set).
UPDATE schedules SET
    next_at = :to_at, last_fired_at = coalesce(:fired_at, last_fired_at), updated_at = :now
WHERE name = :name AND next_at = :from_at AND paused = 0

-- name: run_keys
-- A run's flow-control keys (a fork keeps them).
SELECT concurrency_key, fifo_key, rate_key FROM runs WHERE id = :id

-- name: schema_version_exists
-- Whether the file has perdure's schema_version table (read-only mode checks, never creates).
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version') AS found

-- name: count_children
-- How many child runs (flow tasks included) each of the runs in the JSON array :ids has.
SELECT parent_id, COUNT(*) AS children
FROM runs
WHERE parent_id IN (SELECT value FROM json_each(:ids))
GROUP BY parent_id
