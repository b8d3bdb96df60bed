-- perdure schema, version 1: the tables.
--
-- Everything about a run lives in these tables and nowhere else. The migration
-- runner (PostgresBackend.migrate) takes pg_advisory_xact_lock, creates the schema
-- if needed and runs `SET LOCAL search_path` to it before this file, so every
-- object below is created unqualified inside the target schema.
--
-- The functions live in ../functions/*.sql, not in numbered migrations: migrate
-- applies them (CREATE OR REPLACE, then the grants of privileges.sql) whenever
-- their text differs from what the schema last applied, so a function is edited
-- in one place. A change of a function's signature needs a numbered migration that
-- drops the old one first.
--
-- Lifecycle of a run
-- ------------------
--
--   create_run()             claim (worker)              apply: Complete | Fail
--   ───────────► pending ─────────────────► running ───────────────────────────► completed | failed
--                                            │  ▲ │
--                        apply: Park/Retry/  │  │ │ lease expires (worker died):
--                               Release      ▼  │ │ claimable again, same row
--                                          waiting ┘
--   cancel_run() from any live status ────────────────────────────────────────► cancelled
--
-- * One claim path. A run is claimable when its status is pending, waiting or
--   running and available_at <= perdure_now(). For a running run available_at is the
--   lease expiry, so the runs of a dead worker come back through the same
--   partial index (runs_claim_idx). A run that only an event can wake has
--   available_at = 'infinity'.
-- * Fencing. Every claim bumps lease_token; every write made for a claimed run
--   checks (id, lease_token, status = 'running') in the statement that writes,
--   so a zombie worker or the holder of a cancelled run writes nothing.
-- * The journal (steps) holds one row per step key. Completed and failed rows are
--   final; a retrying row is replaced by the next write of its key. Replay reads
--   the journal in seq order; `output` is `json`, which keeps the exact text the
--   engine wrote.
-- * Waits are registered `wait_for_event`s not yet resolved; signals are events
--   delivered to a live run that did not wait for them yet (buffered, oldest
--   first). Resolving a wait writes a completed journal row (kind 'wait') and
--   makes the run claimable now.
-- * A child run carries parent_id / parent_step; when it ends, the parent's
--   journal row parent_step is written (completed with the child's output, or
--   failed with its error) and the parent becomes claimable now.
-- * Notices: pg_notify on channel '<schema>.wake' (payload 'w:<run id>' when work
--   may be claimable, 'c:<run id>' when a run was cancelled) and '<schema>.done'
--   ('d:<run id>' when a run ended). They are sent inside the writing
--   transaction, so Postgres delivers them at commit. They carry ids only and
--   may be lost: polling is the source of truth.
-- * Time is always the database's: perdure_now() (transaction start).
--
-- Custom SQLSTATEs raised by the functions (mapped to perdure errors in Python):
--   PD001 invalid argument (ValidationError)
--   PD002 run not found (RunNotFound; DETAIL = the run id)

CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT perdure_now()
);

-- The function texts last applied (one row): their digest and the perdure version
-- that applied them, so an older process never replaces newer functions.
CREATE TABLE functions_applied (
    digest          text NOT NULL,
    perdure_version text NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT perdure_now()
);

-- ---------------------------------------------------------------------- tables

CREATE TABLE runs (
    id                    text COLLATE "C" PRIMARY KEY,
    workflow              text NOT NULL,
    -- NULL until a worker that serves the workflow claims the run (a start by name
    -- of a workflow no process had registered): the claim fixes it.
    version               integer,
    status                text NOT NULL
        CHECK (status IN ('pending', 'running', 'waiting', 'completed', 'failed', 'cancelled')),
    input                 jsonb NOT NULL,
    output                json,
    error                 jsonb,
    attempt               integer NOT NULL DEFAULT 1,
    priority              integer NOT NULL DEFAULT 100,
    idempotency_key       text,
    parent_id             text COLLATE "C",
    parent_step           text,
    available_at          timestamptz NOT NULL,
    wake_reason           text
        CHECK (wake_reason IN ('sleep', 'event', 'retry', 'child', 'version', 'released')),
    lease_owner           text,
    lease_token           bigint NOT NULL DEFAULT 0,
    lease_expires_at      timestamptz,
    deadline_at           timestamptz,
    retention_days        integer NOT NULL DEFAULT 30 CHECK (retention_days >= 0),
    claims_since_progress integer NOT NULL DEFAULT 0,
    step_attempts         integer NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL DEFAULT perdure_now(),
    started_at            timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT perdure_now(),
    completed_at          timestamptz
);

-- The one claim path: due live runs, lowest priority first, then oldest.
CREATE INDEX runs_claim_idx ON runs (priority, available_at)
    WHERE status IN ('pending', 'waiting', 'running');
-- Listings: newest first by created_at, the id breaking ties.
CREATE INDEX runs_created_idx ON runs (created_at DESC, id DESC);
CREATE INDEX runs_workflow_idx ON runs (workflow, created_at DESC, id DESC);
CREATE INDEX runs_retention_idx ON runs (completed_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_parent_idx ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX runs_idempotency_idx ON runs (workflow, idempotency_key);
CREATE INDEX runs_input_idx ON runs USING gin (input jsonb_path_ops);

CREATE TABLE steps (
    run_id       text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key          text NOT NULL,
    seq          bigint GENERATED BY DEFAULT AS IDENTITY,
    kind         text NOT NULL CHECK (kind IN ('run', 'sleep', 'wait', 'child', 'rollback')),
    status       text NOT NULL CHECK (status IN ('completed', 'failed', 'retrying')),
    output       json,
    error        jsonb,
    attempts     integer NOT NULL DEFAULT 1,
    started_at   timestamptz,
    completed_at timestamptz,
    recorded_at  timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (run_id, key)
);

CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    type       text NOT NULL,
    data       jsonb,
    created_at timestamptz NOT NULL DEFAULT perdure_now()
);
CREATE INDEX events_run_idx ON events (run_id, id);

CREATE TABLE waits (
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key        text NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    event      text NOT NULL,
    match      jsonb,
    timeout_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (run_id, key)
);
CREATE INDEX waits_event_idx ON waits (event);

CREATE TABLE signals (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    event      text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT perdure_now()
);
CREATE INDEX signals_run_idx ON signals (run_id, event, id);

-- Signals delivered with an idempotency key: the same key again delivers nothing
-- and answers what the first delivery answered.
CREATE TABLE signal_keys (
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key        text NOT NULL,
    outcome    text NOT NULL CHECK (outcome IN ('resolved', 'buffered')),
    created_at timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (run_id, key)
);

CREATE TABLE subscriptions (
    pattern    text NOT NULL CHECK (pattern ~ '^[A-Za-z0-9_.*-]{1,128}$'),
    workflow   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (pattern, workflow)
);

CREATE TABLE workflows (
    name          text NOT NULL,
    version       integer NOT NULL,
    options       jsonb NOT NULL DEFAULT '{}',
    registered_at timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE workers (
    id           text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    workflows    jsonb NOT NULL DEFAULT '[]',
    concurrency  integer NOT NULL,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    stopped_at   timestamptz
);

CREATE TABLE published (
    key        text PRIMARY KEY,
    result     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT perdure_now()
);

