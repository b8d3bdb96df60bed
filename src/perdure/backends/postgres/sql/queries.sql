-- Named queries of the PostgreSQL backend. Each block: a `-- name:` header, one
-- line saying what it does, then the SQL. Connections set search_path to the
-- perdure schema, so tables and functions are unqualified. Queries whose text
-- holds `{ident}` take the one dynamic identifier (the schema, or a notice
-- channel named after it) through psycopg.sql.Identifier in the backend.
--
-- Run rows are returned as the 20 columns of `perdure.records.Run`, in field
-- order; `wake_at` is available_at of a pending or waiting run when finite.

-- name: migrate_lock
-- Serialize migrations of one schema (the key is derived from the schema name).
SELECT pg_advisory_xact_lock(hashtextextended('perdure.migrate:' || %(schema)s, 0))

-- name: schema_exists
-- Whether the perdure schema exists (CREATE SCHEMA needs a privilege we may lack).
SELECT to_regnamespace(%(schema)s) IS NOT NULL

-- name: create_schema
-- Create the perdure schema if it does not exist.
CREATE SCHEMA IF NOT EXISTS {ident}

-- name: drop_schema
-- Delete the perdure schema and everything in it (a test environment's, at its end).
DROP SCHEMA IF EXISTS {ident} CASCADE

-- name: set_local_search_path
-- Point unqualified names at the perdure schema for the rest of this transaction.
SET LOCAL search_path TO {ident}, pg_temp

-- name: clock_exists
-- Whether the schema on the search path has its clock function, perdure_now().
SELECT to_regprocedure('perdure_now()') IS NOT NULL

-- name: create_schema_version
-- The table that records applied migrations (also created by 0001).
CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT perdure_now()
)

-- name: schema_version
-- The highest applied migration (0 on an empty schema).
SELECT coalesce(max(version), 0) FROM schema_version

-- name: schema_version_exists
-- Whether the schema has its schema_version table (read-only mode checks, never creates).
SELECT to_regclass(format('%%I.schema_version', %(schema)s::text)) IS NOT NULL

-- name: record_migration
-- Record one applied migration.
INSERT INTO schema_version (version) VALUES (%(version)s)

-- name: functions_applied
-- The digest and perdure version of the function texts last applied.
SELECT digest, perdure_version FROM functions_applied

-- name: record_functions
-- Record the function texts just applied.
WITH gone AS (DELETE FROM functions_applied)
INSERT INTO functions_applied (digest, perdure_version) VALUES (%(digest)s, %(version)s)

-- name: listen
-- Subscribe this session to a notice channel.
LISTEN {ident}

-- name: ping
-- Check that a connection is alive.
SELECT 1

-- name: begin
-- Open the transaction of an apply batch (sent in the same pipeline as its statements).
BEGIN

-- name: commit
-- Commit an apply batch.
COMMIT

-- name: plan_per_call
-- In a read's transaction: plan its statement for the values of this call (the
-- connections otherwise keep one generic plan per statement).
SET LOCAL plan_cache_mode = force_custom_plan

-- name: now
-- The database clock.
SELECT perdure_now()

-- name: clock_offset
-- How far the schema's clock runs ahead of real time, in seconds.
SELECT extract(epoch FROM perdure_now() - pg_catalog.now())::float8

-- name: set_clock
-- The clock moved {offset} microseconds ahead (a validated int, via psycopg.sql.Literal).
CREATE OR REPLACE FUNCTION perdure_now() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.now() + {offset} * interval '1 microsecond' $$

-- name: clock_moved
-- Tell every worker on the schema to look for work again (sent at commit).
SELECT send_notice('w', '')

-- name: register_workflows
-- Upsert workflow definitions into the registry.
INSERT INTO workflows (name, version, options)
SELECT w.name, w.version, w.options::jsonb
FROM unnest(%(names)s::text[], %(versions)s::integer[], %(options)s::text[]) AS w(name, version, options)
ON CONFLICT (name, version) DO UPDATE SET options = excluded.options, registered_at = perdure_now()

-- name: get_workflow
-- One registered definition: the given version, or the highest when it is NULL.
SELECT name, version, options
FROM workflows
WHERE name = %(name)s AND (%(version)s::integer IS NULL OR version = %(version)s::integer)
ORDER BY version DESC
LIMIT 1

-- name: _created_columns
-- (a part) What create_run and create_keyed_run return of the run c they created or
-- found: the created flag, the run's columns, whether an existing run's input differs,
-- and, for a run leased at its start, its lease token, the database's now and its
-- traceparent (created_from_row() reads them).
c.created,
(c.run).id, (c.run).workflow, (c.run).version, (c.run).status, (c.run).input,
(c.run).output, (c.run).error, (c.run).attempt, (c.run).priority, (c.run).parent_id,
(c.run).created_at, (c.run).started_at, (c.run).completed_at,
CASE WHEN (c.run).status IN ('pending', 'waiting') AND (c.run).available_at <> 'infinity'
     THEN (c.run).available_at END,
(c.run).deadline_at, (c.run).idempotency_key, (c.run).wake_reason,
(c.run).retention_days, (c.run).updated_at, (c.run).parent_step,
NOT c.created AND (c.run).input <> %(input)s::jsonb,
(c.run).lease_token, perdure_now(), (c.run).traceparent

-- name: create_run
-- Create a run idempotently through create_run() and return it with the created flag;
-- with %(worker)s, a run it creates is leased to that worker for %(lease)s seconds (a
-- start handed to a worker of the starting process).
SELECT {{_created_columns}}
FROM create_run(
    p_id => %(id)s, p_workflow => %(workflow)s, p_version => %(version)s::integer,
    p_input => %(input)s::jsonb, p_priority => %(priority)s::integer,
    p_idempotency_key => %(idempotency_key)s::text, p_delay => %(delay)s::double precision,
    p_run_at => %(run_at)s::timestamptz, p_deadline_in => %(deadline_in)s::double precision,
    p_deadline_at => %(deadline_at)s::timestamptz,
    p_retention_days => %(retention_days)s::integer, p_parent_id => %(parent_id)s::text,
    p_parent_step => %(parent_step)s::text, p_traceparent => %(traceparent)s::text,
    p_lease_owner => %(worker)s::text, p_lease => %(lease)s::double precision
) AS c

-- name: insert_new_run
-- The common start from Python (values validated there; no flow-control keys, no
-- absolute times), in one statement with no function layers: insert_run's plain and
-- leased inserts, its events and its wake notice. A start that finds its id or
-- idempotency key taken returns no row, and the caller goes through create_run, which
-- returns the run that holds it (and records a differing input).
WITH c AS (
    INSERT INTO runs (id, workflow, version, status, input, priority, idempotency_key,
                      parent_id, parent_step, available_at, deadline_at, retention_days,
                      traceparent, lease_owner, lease_token, lease_expires_at, started_at,
                      claims_since_progress)
    VALUES (%(id)s::text, %(workflow)s::text, %(version)s::integer,
            CASE WHEN %(worker)s::text IS NULL THEN 'pending' ELSE 'running' END,
            %(input)s::jsonb, %(priority)s::integer, %(idempotency_key)s::text,
            %(parent_id)s::text, %(parent_step)s::text,
            perdure_now() + make_interval(secs => coalesce(
                %(lease)s::double precision, %(delay)s::double precision)),
            perdure_now() + make_interval(secs => %(deadline_in)s::double precision),
            %(retention_days)s::integer, %(traceparent)s::text, %(worker)s::text,
            -- a claim's token (_new_lease), or 0: never claimed
            CASE WHEN %(worker)s::text IS NULL THEN 0
                 ELSE uuid_hash_extended(gen_random_uuid(), 0) END,
            perdure_now() + make_interval(secs => %(lease)s::double precision),
            CASE WHEN %(worker)s::text IS NOT NULL THEN perdure_now() END,
            CASE WHEN %(worker)s::text IS NULL THEN 0 ELSE 1 END)
    ON CONFLICT DO NOTHING
    RETURNING *
),
logged AS (
    INSERT INTO events (run_id, type, data)
    SELECT c.id, 'created', jsonb_strip_nulls(jsonb_build_object(
        'workflow', c.workflow, 'version', c.version, 'parent_id', c.parent_id))
    FROM c
    UNION ALL
    SELECT c.id, 'claimed', jsonb_build_object('worker', c.lease_owner)
    FROM c
    WHERE c.lease_owner IS NOT NULL
),
woken AS (
    -- send_notice('w', id), inline; a leased start wakes no one
    SELECT count(pg_notify(current_schema() || '.wake', 'w:' || c.id)) AS sent
    FROM c
    WHERE c.lease_owner IS NULL
)
SELECT true,
       c.id, c.workflow, c.version, c.status, c.input, c.output, c.error, c.attempt,
       c.priority, c.parent_id, c.created_at, c.started_at, c.completed_at,
       CASE WHEN c.status = 'pending' THEN c.available_at END,
       c.deadline_at, c.idempotency_key, c.wake_reason, c.retention_days, c.updated_at,
       c.parent_step, false, c.lease_token, perdure_now(), c.traceparent
FROM c, woken

-- name: create_keyed_run
-- Create a run with flow-control keys or a debounce through create_keyed_run(); as create_run.
SELECT {{_created_columns}}
FROM create_keyed_run(
    p_id => %(id)s, p_workflow => %(workflow)s, p_version => %(version)s::integer,
    p_input => %(input)s::jsonb, p_priority => %(priority)s::integer,
    p_idempotency_key => %(idempotency_key)s::text, p_delay => %(delay)s::double precision,
    p_run_at => %(run_at)s::timestamptz, p_deadline_in => %(deadline_in)s::double precision,
    p_deadline_at => %(deadline_at)s::timestamptz,
    p_retention_days => %(retention_days)s::integer, p_parent_id => %(parent_id)s::text,
    p_parent_step => %(parent_step)s::text,
    p_concurrency_key => %(concurrency_key)s::text, p_fifo_key => %(fifo_key)s::text,
    p_rate_key => %(rate_key)s::text, p_debounce_key => %(debounce_key)s::text,
    p_debounce => %(debounce)s::double precision, p_traceparent => %(traceparent)s::text
) AS c

-- name: start_flow_run
-- Start a flow run through start_flow_run() (flows.sql holds the other flow queries);
-- the row as create_run's.
SELECT {{_created_columns}}
FROM start_flow_run(
    %(id)s::text, %(workflow)s::text, %(version)s::integer, %(input)s::jsonb,
    %(priority)s::integer, %(idempotency_key)s::text, %(retention_days)s::integer,
    %(step_keys)s::jsonb
) AS c

-- name: fork_flow_run
-- A fork of a flow run: start_flow_run() with the steps it keeps completed from the
-- start and where it came from in its created event; the row as create_run's.
SELECT {{_created_columns}}
FROM start_flow_run(
    %(id)s::text, %(workflow)s::text, %(version)s::integer, %(input)s::jsonb,
    %(priority)s::integer, NULL::text, %(retention_days)s::integer, %(step_keys)s::jsonb,
    %(copied)s::jsonb, %(origin)s::jsonb
) AS c

-- name: cancel_run
-- Cancel a run and its live descendants through cancel_tree().
SELECT cancel_tree(%(run_id)s)

-- name: cancel_with_rollback
-- Hand a live run to a rollback pass, then cancel it, through cancel_with_rollback().
SELECT cancel_with_rollback(%(run_id)s)

-- name: deliver_signal
-- Deliver a signal through deliver_signal(): resolved, buffered or ended.
SELECT deliver_signal(%(run_id)s, %(event)s, %(payload)s::jsonb, %(idempotency_key)s::text)

-- name: publish
-- Publish an event through publish_event(): {"started": [...], "resumed": [...]}.
SELECT publish_event(%(event)s, %(payload)s::jsonb, %(idempotency_key)s::text)

-- name: subscribe_topic
-- Add a durable topic subscription; returns a row only if it is new.
INSERT INTO subscriptions (pattern, workflow) VALUES (%(pattern)s, %(workflow)s)
ON CONFLICT DO NOTHING
RETURNING 1

-- name: unsubscribe_topic
-- Remove a topic subscription; returns a row only if there was one.
DELETE FROM subscriptions WHERE pattern = %(pattern)s AND workflow = %(workflow)s
RETURNING 1

-- name: list_subscriptions
-- All topic subscriptions.
SELECT pattern, workflow FROM subscriptions

-- name: _run_columns
-- (a part) The columns of a run r, as run_from_row() reads them.
r.id, r.workflow, r.version, r.status, r.input, r.output, r.error, r.attempt,
r.priority, r.parent_id, r.created_at, r.started_at, r.completed_at,
CASE WHEN r.status IN ('pending', 'waiting') AND r.available_at <> 'infinity'
     THEN r.available_at END,
r.deadline_at, r.idempotency_key, r.wake_reason, r.retention_days, r.updated_at,
r.parent_step

-- name: get_run
-- One run by id.
SELECT {{_run_columns}}
FROM runs r
WHERE r.id = %(run_id)s

-- name: list_runs
-- Runs matching the filters, newest first, one more than the page to detect the end.
SELECT {{_run_columns}}
FROM runs r
WHERE (%(workflow)s::text IS NULL OR r.workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR r.status = %(status)s::text)
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR r.created_at < %(until)s::timestamptz)
  AND (%(input_match)s::jsonb IS NULL OR r.input @> %(input_match)s::jsonb)
  AND (%(parent_id)s::text IS NULL OR r.parent_id = %(parent_id)s::text)
  AND (r.kind <> 'task' OR %(parent_id)s::text IS NOT NULL)  -- tasks: under their flow run
  AND (%(after_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(after_at)s::timestamptz, %(after_id)s::text))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s::integer + 1

-- name: get_steps
-- A run's journal in write order.
SELECT key, kind, status, output, error, attempts, started_at, completed_at
FROM steps
WHERE run_id = %(run_id)s
ORDER BY seq

-- name: get_call_order
-- The steps a run's body asked for, in the order it first asked ('kind:key').
SELECT call_order FROM runs WHERE id = %(run_id)s

-- name: get_steps_with_superseded
-- A run's journal and the rows retries superseded, in the order they were first written.
SELECT s.seq, s.key, s.kind, s.status, s.output, s.error, s.attempts, s.started_at,
       s.completed_at, false
FROM steps s
WHERE s.run_id = %(run_id)s
UNION ALL
SELECT x.seq, x.key, x.kind, x.status, x.output, x.error, x.attempts, x.started_at,
       x.completed_at, true
FROM superseded_steps x
WHERE x.run_id = %(run_id)s
ORDER BY 1

-- name: retry_run
-- Resume a failed or cancelled run through retry_run().
SELECT {{_run_columns}}
FROM retry_run(%(run_id)s, %(from_step)s, %(by)s) r

-- name: fork_run
-- A new run with a copy of a run's journal, through fork_run().
SELECT {{_run_columns}}
FROM fork_run(%(source_id)s, %(id)s, %(before_step)s, %(input)s::jsonb,
              %(version)s::integer, %(by)s) r

-- name: watch_run
-- Register (or refresh) a watcher of a run for the next %(seconds)s seconds.
INSERT INTO watchers (run_id, watcher, until)
VALUES (%(run_id)s, %(watcher)s, perdure_now() + make_interval(secs => %(seconds)s::double precision))
ON CONFLICT (run_id, watcher) DO UPDATE SET until = excluded.until

-- name: unwatch_run
-- A watcher of a run stops watching.
DELETE FROM watchers WHERE run_id = %(run_id)s AND watcher = %(watcher)s

-- name: get_events
-- A run's audit trail with completed journal rows as step_completed (or value) events.
SELECT e.type, e.data, e.created_at
FROM (
    SELECT type, data, created_at, 1 AS source, id AS ord
    FROM events
    WHERE run_id = %(run_id)s
    UNION ALL
    SELECT CASE WHEN key LIKE '~set:%%' THEN 'value' ELSE 'step_completed' END,
           CASE WHEN key LIKE '~set:%%' THEN output::jsonb
                ELSE jsonb_build_object('step', key, 'kind', kind) END,
           recorded_at, 0, seq
    FROM steps
    WHERE run_id = %(run_id)s AND status = 'completed'
) AS e
ORDER BY e.created_at, e.source, e.ord

-- name: workflow_summaries
-- Run counts per workflow and status, plus every registered name (status NULL).
SELECT workflow, status, count(*)::integer FROM runs WHERE kind <> 'task'
GROUP BY workflow, status
UNION ALL
SELECT DISTINCT name, NULL, 0 FROM workflows
UNION ALL
SELECT DISTINCT name, NULL, 0 FROM flows

-- name: register_worker
-- Upsert a worker row; last_seen_at is the database's now.
INSERT INTO workers (id, host, pid, workflows, concurrency, started_at, last_seen_at, stopped_at)
VALUES (%(id)s, %(host)s, %(pid)s::integer, %(workflows)s::jsonb, %(concurrency)s::integer,
        %(started_at)s::timestamptz, perdure_now(), %(stopped_at)s::timestamptz)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, workflows = excluded.workflows,
    concurrency = excluded.concurrency, started_at = excluded.started_at,
    last_seen_at = perdure_now(), stopped_at = excluded.stopped_at

-- name: deregister_worker
-- Mark a worker stopped.
UPDATE workers SET stopped_at = perdure_now() WHERE id = %(id)s

-- name: list_workers
-- Workers seen within the last N seconds, newest first.
SELECT id, host, pid, workflows, concurrency, started_at, last_seen_at, stopped_at
FROM workers
WHERE last_seen_at >= perdure_now() - make_interval(secs => %(seconds)s::double precision)
ORDER BY last_seen_at DESC, id

-- name: claim_runs
-- Claim due runs of the given (workflow, version) pairs in one statement: lock them
-- (SKIP LOCKED), start a new lease, log lease_expired/claimed events, and return each
-- with its journal and open waits. A run without a version (started by the name of
-- a workflow no process had registered) is claimed by any worker serving the name,
-- and takes that worker's highest version of it.
WITH served AS (
    SELECT p.workflow, p.version
    FROM unnest(%(workflows)s::text[], %(versions)s::integer[]) AS p(workflow, version)
),
keyless AS (
    SELECT r.id, r.status, r.lease_owner, r.priority, r.available_at,
           coalesce(r.version, (SELECT max(s.version) FROM served s
                                WHERE s.workflow = r.workflow)) AS version
    FROM runs r
    WHERE r.status IN ('pending', 'waiting', 'running')
      AND r.concurrency_key IS NULL
      AND r.available_at <= perdure_now()
      AND ((r.workflow, r.version) IN (SELECT s.workflow, s.version FROM served s)
           OR (r.version IS NULL AND r.workflow IN (SELECT s.workflow FROM served s)))
    ORDER BY r.priority, r.available_at
    LIMIT %(limit)s::integer
    FOR UPDATE OF r SKIP LOCKED
),
keyed AS (
    -- Runs with a lane (started under limits this worker does not know), on one
    -- claim in eight (%(keyed)s): workflow by workflow through the lane index.
    SELECT k.id, k.status, k.lease_owner, k.priority, k.available_at, k.version
    FROM (SELECT DISTINCT s.workflow FROM served s) w
    CROSS JOIN LATERAL (
        SELECT r.id, r.status, r.lease_owner, r.priority, r.available_at,
               coalesce(r.version, (SELECT max(s.version) FROM served s
                                    WHERE s.workflow = r.workflow)) AS version
        FROM runs r
        WHERE %(keyed)s::boolean
          AND r.workflow = w.workflow
          AND r.status IN ('pending', 'waiting', 'running')
          AND r.concurrency_key IS NOT NULL
          AND r.available_at <= perdure_now()
          AND (r.version IS NULL OR (r.workflow, r.version) IN (SELECT s.workflow, s.version
                                                               FROM served s))
        ORDER BY r.concurrency_key, r.priority, r.available_at
        LIMIT %(limit)s::integer
        FOR UPDATE OF r SKIP LOCKED
    ) k
),
due AS (
    SELECT d.id, d.status, d.lease_owner, d.version
    FROM (SELECT * FROM keyless UNION ALL SELECT * FROM keyed) d
    ORDER BY d.priority, d.available_at
    LIMIT %(limit)s::integer
),
claimed AS (
    UPDATE runs AS r SET
        status = 'running',
        version = due.version,
        {{_new_lease}}
    FROM due
    WHERE r.id = due.id
      AND commit_unsynced()  -- a claim's loss in a crash is harmless
    RETURNING r.*, due.status AS previous_status, due.lease_owner AS previous_owner
),
{{_claim_end}}

-- name: extend_leases
-- Renew the leases still held (same token, running), locking rows in id order, and
-- touch the worker's last_seen_at; returns the ids still held.
WITH seen AS (
    UPDATE workers SET last_seen_at = perdure_now()
    WHERE id = %(worker)s AND commit_unsynced()  -- a renewal's loss is harmless
),
held AS (
    SELECT r.id
    FROM runs r
    JOIN unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS h(id, token)
      ON h.id = r.id AND h.token = r.lease_token
    WHERE r.status = 'running'
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE runs AS r SET
    lease_expires_at = perdure_now() + make_interval(secs => %(lease)s::double precision),
    available_at = perdure_now() + make_interval(secs => %(lease)s::double precision)
FROM held
WHERE r.id = held.id AND commit_unsynced()
RETURNING r.id

-- name: release_orphans
-- Make runs leased to this worker but not among the ids it holds claimable now.
UPDATE runs SET lease_expires_at = perdure_now(), available_at = perdure_now()
WHERE status = 'running'
  AND lease_owner = %(worker)s
  AND id <> ALL(%(ids)s::text[])
RETURNING id

-- name: apply_transition
-- Apply one fenced transition that has no waits and no children, in one statement:
-- the fenced UPDATE applies the outcome, and every other write selects FROM it, so a
-- failed fence writes nothing. Returns %(ord)s (its place in a batch) and the journal
-- keys written (no row: lease lost). apply_transitions() runs this same statement for
-- each transition of a batch (functions/51_apply_transitions.sql).
WITH u AS (SELECT * FROM {{_steps_written}}),  -- the journal rows
fence AS (
    UPDATE runs AS r SET
        status = CASE %(outcome)s::text
            WHEN 'none' THEN 'running'
            WHEN 'complete' THEN 'completed'
            WHEN 'fail' THEN 'failed'
            ELSE 'waiting' END,
        lease_owner = CASE WHEN %(outcome)s::text = 'none' THEN r.lease_owner END,
        lease_expires_at = CASE WHEN %(outcome)s::text = 'none' THEN r.lease_expires_at END,
        available_at = CASE %(outcome)s::text
            WHEN 'none' THEN r.available_at
            WHEN 'park' THEN coalesce(
                least(%(wake_at)s::timestamptz, r.deadline_at,
                      (SELECT min(w.timeout_at) FROM waits w
                       WHERE w.run_id = r.id AND w.key NOT IN (SELECT u.key FROM u))),
                'infinity')
            WHEN 'retry' THEN coalesce(least(%(wake_at)s::timestamptz, r.deadline_at), perdure_now())
            WHEN 'release' THEN perdure_now()
            ELSE 'infinity' END,
        wake_reason = CASE %(outcome)s::text
            WHEN 'none' THEN r.wake_reason
            WHEN 'park' THEN %(reason)s::text
            WHEN 'retry' THEN 'retry' END,
        attempt = r.attempt + CASE WHEN %(outcome)s::text = 'retry' THEN 1 ELSE 0 END,
        output = CASE WHEN %(outcome)s::text = 'complete' THEN %(output)s::json ELSE r.output END,
        -- fail and retry carry an error; a park may (a diverged run's)
        error = CASE %(outcome)s::text WHEN 'complete' THEN NULL
                     ELSE coalesce(%(error)s::jsonb, error) END,
        completed_at = CASE WHEN %(outcome)s::text IN ('complete', 'fail') THEN perdure_now() END,
        step_attempts = r.step_attempts + %(step_attempts)s::integer,
        call_order = call_order || %(asked)s::text[],
        claims_since_progress = 0,
        updated_at = perdure_now()
    WHERE r.id = %(run_id)s::text AND r.lease_token = %(token)s::bigint AND r.status = 'running'
    RETURNING r.id, r.parent_id, r.parent_step, r.created_at, r.available_at, r.attempt
),
written AS (
    -- The statement of write_steps(), its text shared, not called: calling the
    -- function from here cost W1 about 8% at the README setup (bench/RESULTS.md,
    -- 2026-11-25).
    {{_journal_insert}}
    FROM fence f
    CROSS JOIN u
    {{_journal_upsert}}
),
unwaited AS (
    DELETE FROM waits w
    USING fence f
    WHERE w.run_id = f.id
      AND (w.key IN (SELECT u.key FROM u) OR %(outcome)s::text IN ('complete', 'fail'))
),
unbuffered AS (
    DELETE FROM signals g
    USING fence f
    WHERE g.run_id = f.id AND %(outcome)s::text IN ('complete', 'fail')
),
reopened AS (
    -- A workflow retry: the failed steps that ended the attempt run again, fresh budget.
    UPDATE steps s SET status = 'retrying', attempts = 0
    FROM fence f
    WHERE s.run_id = f.id AND s.key = ANY (%(reopen)s::text[]) AND s.status = 'failed'
),
logged AS (
    INSERT INTO events (run_id, type, data)
    SELECT f.id, e.type, e.data::jsonb
    FROM fence f
    CROSS JOIN {{_events_logged}}
    ORDER BY e.ord
)
SELECT %(ord)s::integer, (SELECT coalesce(array_agg(w.key), '{}') FROM written w),
       CASE WHEN %(outcome)s::text = 'complete'
            THEN send_end(f.id, 'completed', f.attempt, %(output)s::text)
            WHEN %(outcome)s::text = 'fail' THEN send_end(f.id, 'failed', f.attempt, %(error)s::text)
            WHEN EXISTS (SELECT 1 FROM watchers w  -- watched(), inline: the hot path
                         WHERE w.run_id = f.id AND w.until > perdure_now())
            THEN send_notice('p', f.id) END,
       CASE WHEN %(outcome)s::text IN ('park', 'retry', 'release') AND f.available_at <= perdure_now()
            THEN send_notice('w', f.id) END,
       -- A child's end: the parent's journal row and wake-up, under the parent's lock.
       CASE WHEN %(outcome)s::text IN ('complete', 'fail') AND f.parent_id IS NOT NULL
            THEN child_ended(
                f.parent_id, f.parent_step, f.id, f.created_at,
                CASE WHEN %(outcome)s::text = 'complete' THEN 'completed' ELSE 'failed' END,
                %(output)s::json, %(error)s::jsonb) END,
       -- A failed run's live children end with it.
       CASE WHEN %(outcome)s::text = 'fail' THEN cancel_descendants(f.id) END
FROM fence f

-- name: apply_transitions
-- Apply fenced transitions without waits or children through apply_transitions(), in
-- the order of %(batch)s (a JSON list of their parameters): per transition applied, its
-- place in the list and the journal keys it wrote (no row: lease lost).
SELECT t.applied_place, t.applied_keys FROM apply_transitions(%(batch)s::json) AS t

-- name: apply_transition_general
-- Apply one fenced transition of any shape (waits, children) through apply_transition(),
-- its journal rows and events taken apart into the arrays the function takes.
SELECT t.ok, t.written
FROM (
    SELECT coalesce(array_agg(u.key ORDER BY u.ord), '{}') AS keys,
           coalesce(array_agg(u.kind ORDER BY u.ord), '{}') AS kinds,
           coalesce(array_agg(u.status ORDER BY u.ord), '{}') AS statuses,
           coalesce(array_agg(u.output ORDER BY u.ord), '{}') AS outputs,
           coalesce(array_agg(u.error ORDER BY u.ord), '{}') AS errors,
           coalesce(array_agg(u.attempts ORDER BY u.ord), '{}') AS attempts,
           coalesce(array_agg(u.started_at ORDER BY u.ord), '{}') AS started,
           coalesce(array_agg(u.completed_at ORDER BY u.ord), '{}') AS completed
    FROM {{_steps_written}}
) s,
(
    SELECT coalesce(array_agg(e.type ORDER BY e.ord), '{}') AS types,
           coalesce(array_agg(e.data ORDER BY e.ord), '{}') AS data
    FROM {{_events_logged}}
) ev,
apply_transition(
    %(run_id)s::text, %(token)s::bigint,
    s.keys, s.kinds, s.statuses, s.outputs, s.errors, s.attempts, s.started,
    s.completed, ev.types, ev.data,
    %(step_attempts)s::integer, %(outcome)s::text, %(reason)s::text,
    %(wake_at)s::timestamptz, %(output)s::text, %(error)s::text,
    %(wait_keys)s::text[], %(wait_events)s::text[], %(wait_matches)s::text[],
    %(wait_timeouts)s::timestamptz[], %(children)s::jsonb, %(asked)s::text[]
) AS t

-- name: _steps_written
-- (a part) The journal rows of a transition, from its %(steps)s JSON (a list of
-- objects; output and error as JSON text in a string), in their order (ord).
ROWS FROM (json_to_recordset(%(steps)s::json) AS (
    key text, kind text, status text, output text, error text, attempts integer,
    started_at timestamptz, completed_at timestamptz
)) WITH ORDINALITY AS u(key, kind, status, output, error, attempts, started_at, completed_at, ord)

-- name: _journal_insert
-- (a part) The start of a journal write (write_steps() and apply_transition): rows of
-- the run f.id from the journal rows u (as _steps_written gives them); NULL
-- completed_at means now. _journal_upsert ends it, after the FROM.
INSERT INTO steps AS s (run_id, key, kind, status, output, error, attempts,
                        started_at, completed_at, recorded_at)
SELECT f.id, u.key, u.kind, u.status, u.output::json, u.error::jsonb, u.attempts,
       u.started_at, coalesce(u.completed_at, perdure_now()), perdure_now()

-- name: _journal_upsert
-- (a part) The end of a journal write, in the rows' order: a 'retrying' row is
-- replaced, a final (completed or failed) one wins; returns the keys written.
ORDER BY u.ord
ON CONFLICT (run_id, key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status,
    output = excluded.output, error = excluded.error, attempts = excluded.attempts,
    started_at = excluded.started_at, completed_at = excluded.completed_at,
    recorded_at = excluded.recorded_at
WHERE s.status = 'retrying'
RETURNING s.key

-- name: _events_logged
-- (a part) The events of a transition, from its %(events)s JSON (a list of objects;
-- data as JSON text in a string), in their order (ord).
ROWS FROM (json_to_recordset(%(events)s::json) AS (type text, data text))
    WITH ORDINALITY AS e(type, data, ord)

-- name: existing_steps
-- Journal rows of the given (run id, key) pairs (final rows a transition did not overwrite).
SELECT s.run_id, s.key, s.kind, s.status, s.output, s.error, s.attempts, s.started_at,
       s.completed_at
FROM steps s
JOIN unnest(%(run_ids)s::text[], %(keys)s::text[]) AS k(run_id, key)
  ON s.run_id = k.run_id AND s.key = k.key

-- name: next_wake_at
-- The earliest finite available_at of live runs of the given (workflow, version) pairs
-- (and of runs of their names without a version).
WITH served AS (
    SELECT p.workflow, p.version
    FROM unnest(%(workflows)s::text[], %(versions)s::integer[]) AS p(workflow, version)
)
SELECT least(
    (SELECT min(r.available_at)
     FROM runs r
     WHERE r.status IN ('pending', 'waiting', 'running')
       AND r.concurrency_key IS NULL
       AND r.available_at < 'infinity'
       AND ((r.workflow, r.version) IN (SELECT s.workflow, s.version FROM served s)
            OR (r.version IS NULL AND r.workflow IN (SELECT s.workflow FROM served s)))),
    (SELECT min(r.available_at)  -- runs with a lane, through the lane index
     FROM runs r
     WHERE r.workflow IN (SELECT s.workflow FROM served s)
       AND r.status IN ('pending', 'waiting', 'running')
       AND r.concurrency_key IS NOT NULL
       AND r.available_at < 'infinity'
       AND (r.version IS NULL OR (r.workflow, r.version) IN (SELECT s.workflow, s.version
                                                            FROM served s))))

-- name: sweep
-- Delete up to N ended runs past their retention (journal, events, waits, signals cascade).
WITH doomed AS (
    SELECT id
    FROM runs
    WHERE status IN ('completed', 'failed', 'cancelled')
      AND completed_at + make_interval(days => least(retention_days, %(max_days)s::integer)) < perdure_now()
    ORDER BY completed_at
    LIMIT %(limit)s::integer
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM runs r USING doomed d WHERE r.id = d.id RETURNING r.id
)
SELECT count(*)::integer FROM gone

-- name: queue_gauges
-- Per workflow with live runs: running, due for a claim, the oldest due one's wait,
-- pending and waiting.
SELECT workflow,
       count(*) FILTER (WHERE status = 'running')::integer,
       count(*) FILTER (WHERE status <> 'running' AND available_at <= perdure_now())::integer,
       coalesce(extract(epoch FROM perdure_now() - min(available_at) FILTER (
           WHERE status <> 'running' AND available_at <= perdure_now())), 0)::double precision,
       count(*) FILTER (WHERE status = 'pending')::integer,
       count(*) FILTER (WHERE status = 'waiting')::integer
FROM runs
WHERE status IN ('pending', 'waiting', 'running')
GROUP BY workflow
ORDER BY workflow

-- name: defer_unavailable
-- Park due runs of the served names whose version no served pair has (5 s doubling to 5 min).
WITH due AS (
    SELECT r.id, r.version
    FROM runs r
    WHERE r.status IN ('pending', 'waiting', 'running')
      AND r.available_at <= perdure_now() - make_interval(secs => %(grace)s)
      AND r.workflow = ANY(%(names)s::text[])
      AND r.version IS NOT NULL
      AND (r.workflow, r.version) NOT IN (
          SELECT p.workflow, p.version
          FROM unnest(%(workflows)s::text[], %(versions)s::integer[]) AS p(workflow, version))
    ORDER BY r.available_at, r.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), delays AS (
    SELECT d.id, d.version,
           least(300, 5 * power(2, (SELECT count(*) FROM events e
                                    WHERE e.run_id = d.id AND e.type = 'version_unavailable')))
               AS delay
    FROM due d
), parked AS (
    UPDATE runs r SET
        status = 'waiting',
        wake_reason = 'version',
        lease_owner = NULL,
        lease_expires_at = NULL,
        available_at = perdure_now() + make_interval(secs => d.delay),
        updated_at = perdure_now()
    FROM delays d
    WHERE r.id = d.id AND commit_unsynced()  -- parked again by the next pass if lost
    RETURNING r.id, d.version, d.delay
), logged AS (
    INSERT INTO events (run_id, type, data)
    SELECT id, 'version_unavailable',
           jsonb_build_object('worker', %(worker)s::text, 'version', version, 'retry_in', delay)
    FROM parked
)
SELECT id FROM parked

-- name: park_undecodable
-- Park a claimed run whose sealed values its worker cannot open (5 s doubling to 5 min).
WITH held AS (
    SELECT r.id,
           least(300, 5 * power(2, (SELECT count(*) FROM events e
                                    WHERE e.run_id = r.id AND e.type = 'undecodable')))
               AS delay
    FROM runs r
    WHERE r.id = %(id)s AND r.lease_token = %(token)s AND r.status = 'running'
    FOR UPDATE
), parked AS (
    UPDATE runs r SET
        status = 'waiting',
        wake_reason = 'undecodable',
        lease_owner = NULL,
        lease_expires_at = NULL,
        claims_since_progress = 0,
        available_at = perdure_now() + make_interval(secs => h.delay),
        updated_at = perdure_now()
    FROM held h
    WHERE r.id = h.id AND commit_unsynced()  -- parked again by the next claim if lost
    RETURNING r.id, r.available_at, h.delay
), logged AS (
    INSERT INTO events (run_id, type, data)
    SELECT id, 'undecodable',
           jsonb_build_object('worker', %(worker)s::text, 'reason', %(reason)s::text,
                              'retry_in', delay)
    FROM parked
)
SELECT available_at FROM parked

-- name: runs_stats_stale
-- True when runs grew a lot since its last ANALYZE (judged by its size on disk, which,
-- unlike the statistics collector's counters, is never behind).
SELECT CASE WHEN c.reltuples < 0 THEN v.pages > 50
            ELSE v.pages > 2 * c.relpages + 100 END
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (
    SELECT pg_relation_size(c.oid) / current_setting('block_size')::integer AS pages) v
WHERE n.nspname = current_schema() AND c.relname = 'runs'

-- name: analyze_runs
-- Refresh the planner statistics of runs, so claims keep using the claim index.
ANALYZE runs

-- name: claim_runs_limited
-- claim_runs under flow-control limits: limited_candidates() picks them (see docs/flow-control.md).
WITH served AS (
    SELECT p.workflow, p.version
    FROM claim_served(%(workflows)s::text[], %(versions)s::integer[]) AS p
),
admitted AS (
    SELECT a.id, a.priority, a.lane_rank, a.available_at
    FROM limited_candidates(
        %(workflows)s::text[], %(versions)s::integer[], %(limit)s::integer,
        %(l_workflows)s::text[], %(l_concurrency)s::integer[], %(l_key_concurrency)s::integer[],
        %(l_rate)s::integer[], %(l_period)s::double precision[], %(l_fifo)s::boolean[]) AS a
),
plain AS (
    SELECT r.id, r.priority, 1::bigint AS lane_rank, r.available_at
    FROM runs r
    WHERE cardinality(%(plain_workflows)s::text[]) > 0
      AND r.status IN ('pending', 'waiting', 'running')
      AND r.concurrency_key IS NULL  -- the claim index: never the limited backlogs
      AND r.available_at <= perdure_now()
      AND r.workflow = ANY(%(plain_workflows)s::text[])
      AND ((r.workflow, r.version) IN (SELECT s.workflow, s.version FROM served s)
           OR (r.version IS NULL AND r.workflow IN (SELECT s.workflow FROM served s)))
    ORDER BY r.priority, r.available_at
    LIMIT %(limit)s::integer
),
stray AS (
    SELECT t.id, t.priority, t.lane_rank, t.available_at
    FROM claim_strays(%(workflows)s::text[], %(versions)s::integer[],
                      %(plain_workflows)s::text[], %(l_workflows)s::text[],
                      %(limit)s::integer, %(scan)s::integer) AS t
),
picked AS (
    SELECT a.id FROM (
        SELECT * FROM admitted UNION ALL SELECT * FROM plain UNION ALL SELECT * FROM stray
    ) a
    ORDER BY a.priority, a.lane_rank, a.available_at
    LIMIT %(limit)s::integer
),
due AS (
    -- Each picked run by its primary key (never a scan of the backlog), locked.
    SELECT d.id, d.status, d.lease_owner, d.version
    FROM picked p
    CROSS JOIN LATERAL (
        SELECT r.id, r.status, r.lease_owner,
               coalesce(r.version, (SELECT max(s.version) FROM served s
                                    WHERE s.workflow = r.workflow)) AS version
        FROM runs r
        WHERE r.id = p.id
          AND r.status IN ('pending', 'waiting', 'running')
          AND r.available_at <= perdure_now()
        FOR UPDATE OF r SKIP LOCKED
    ) d
),
claimed AS (
    UPDATE runs AS r SET
        status = 'running',
        version = due.version,
        {{_new_lease}}
    FROM due
    WHERE r.id = due.id
      AND r.id = ANY(ARRAY(SELECT d.id FROM due d))  -- by primary key, whatever the plan
      AND commit_unsynced()  -- a claim's loss in a crash is harmless
    RETURNING r.*, due.status AS previous_status, due.lease_owner AS previous_owner
),
{{_claim_end}}

-- name: _new_lease
-- (a part) The columns both claims set on a run they lease to %(worker)s for %(lease)s
-- seconds. The token is 64 bits hashed from a v4 uuid's 122 random bits (the
-- server's strong random source): never guessed, and never one a claim a crash undid
-- handed out (claims commit without waiting for their WAL flush): docs/storage.md.
lease_token = uuid_hash_extended(gen_random_uuid(), 0),
        lease_owner = %(worker)s::text,
        lease_expires_at = perdure_now() + make_interval(secs => %(lease)s::double precision),
        available_at = perdure_now() + make_interval(secs => %(lease)s::double precision),
        started_at = coalesce(r.started_at, perdure_now()),
        wake_reason = NULL,
        claims_since_progress = r.claims_since_progress + 1,
        updated_at = perdure_now()

-- name: _claim_end
-- (a part) The end of both claims, after their "claimed" CTE: log lease_expired and
-- claimed events, and return each claimed run with its journal and open waits.
logged AS (
    INSERT INTO events (run_id, type, data)
    SELECT c.id, 'lease_expired', jsonb_build_object('worker', c.previous_owner)
    FROM claimed c
    WHERE c.previous_status = 'running'
    UNION ALL
    SELECT c.id, 'claimed',
           jsonb_build_object('worker', %(worker)s::text)
    FROM claimed c
)
SELECT c.id, c.workflow, c.version, c.status, c.input, c.output, c.error, c.attempt,
       c.priority, c.parent_id, c.created_at, c.started_at, c.completed_at,
       NULL::timestamptz, c.deadline_at, c.idempotency_key, c.wake_reason, c.retention_days,
       c.updated_at, c.parent_step,
       c.lease_token, c.claims_since_progress, c.step_attempts,
       c.previous_status = 'running', perdure_now(),
       (SELECT json_agg(json_build_array(s.key, s.kind, s.status, s.output, s.error, s.attempts,
                                         s.started_at, s.completed_at) ORDER BY s.seq)
        FROM steps s WHERE s.run_id = c.id),
       (SELECT json_agg(json_build_array(w.key, w.event, w.match, w.timeout_at) ORDER BY w.seq)
        FROM waits w WHERE w.run_id = c.id),
       c.traceparent, c.call_order
FROM claimed c
ORDER BY c.priority, c.id

-- name: _schedule_columns
-- (a part) The columns of a schedule s, as schedule_from_row() reads them.
s.name, s.workflow, s.cron, s.timezone, s.catch_up, s.paused, s.next_at, s.input,
s.last_fired_at, s.created_at

-- name: put_schedule
-- Insert or update a schedule; an unchanged cron, zone and workflow keep next_at and paused.
INSERT INTO schedules AS s (name, workflow, cron, input, timezone, catch_up, next_at)
VALUES (%(name)s, %(workflow)s, %(cron)s, %(input)s::jsonb, %(timezone)s, %(catch_up)s,
        %(next_at)s::timestamptz)
ON CONFLICT (name) DO UPDATE SET
    input = excluded.input,
    catch_up = excluded.catch_up,
    next_at = CASE WHEN (s.cron, s.timezone, s.workflow)
                        = (excluded.cron, excluded.timezone, excluded.workflow)
                   THEN s.next_at ELSE excluded.next_at END,
    cron = excluded.cron,
    timezone = excluded.timezone,
    workflow = excluded.workflow,
    updated_at = perdure_now()
RETURNING {{_schedule_columns}}

-- name: get_schedule
-- One schedule by name.
SELECT {{_schedule_columns}} FROM schedules s WHERE s.name = %(name)s

-- name: list_schedules
-- Every schedule, by name.
SELECT {{_schedule_columns}} FROM schedules s ORDER BY s.name

-- name: pause_schedule
-- Pause or resume a schedule (resuming a paused one sets next_at); returns a row if it exists.
UPDATE schedules SET
    paused = %(paused)s::boolean,
    next_at = CASE WHEN paused THEN coalesce(%(next_at)s::timestamptz, next_at) ELSE next_at END,
    updated_at = perdure_now()
WHERE name = %(name)s
RETURNING 1

-- name: delete_schedule
-- Delete a schedule; returns a row if there was one.
DELETE FROM schedules WHERE name = %(name)s RETURNING 1

-- name: due_schedules
-- Schedules not paused whose next tick is past, earliest first.
SELECT {{_schedule_columns}} FROM schedules s
WHERE NOT s.paused AND s.next_at <= perdure_now()
ORDER BY s.next_at
LIMIT %(limit)s::integer

-- name: advance_schedule
-- Move next_at on if no other process did first (compare-and-set); returns a row if so.
UPDATE schedules SET
    next_at = %(to_at)s::timestamptz,
    last_fired_at = coalesce(%(fired_at)s::timestamptz, last_fired_at),
    updated_at = perdure_now()
WHERE name = %(name)s AND next_at = %(from_at)s::timestamptz AND NOT paused
RETURNING 1
