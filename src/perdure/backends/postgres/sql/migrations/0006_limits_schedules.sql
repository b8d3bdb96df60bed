-- Flow control and schedules (DESIGN.md §10).
--
-- Limits. A run of a workflow that declares a limit (concurrency, key concurrency,
-- a rate limit or a FIFO key) carries its keys, computed once at start:
--   concurrency_key  the run's lane: its concurrency key, else its FIFO key, else its
--                    rate-limit key, else '' (one lane). NULL: no limit applies to
--                    the run (its workflow declares none, or it was started by a
--                    process without the workflow's definition).
--   fifo_key         runs of one (workflow, fifo_key) run one at a time, oldest first.
--   rate_key         runs of one (workflow, rate_key) share a rate limit ('' : the
--                    workflow's own).
-- The limited claim (queries.sql claim_runs_limited) counts what it needs from
-- these indexes under one advisory lock, so racing workers never overshoot; runs
-- without a lane never enter them, so the plain claim path pays nothing.
--
-- Debounce. A pending run started with a debounce key takes the input of later starts
-- with the same key and is pushed back; once claimed it leaves the partial index.
--
-- Schedules. One row per named schedule; next_at is the next tick (UTC) not yet
-- fired. Firing starts the tick's run through the ordinary idempotent start (the
-- tick is the idempotency key), then moves next_at on with a compare-and-set.

ALTER TABLE runs
    ADD COLUMN concurrency_key text,
    ADD COLUMN fifo_key        text,
    ADD COLUMN rate_key        text,
    ADD COLUMN debounce_key    text;

-- The lanes' due runs, in claim order.
CREATE INDEX runs_lane_idx ON runs (workflow, concurrency_key, priority, available_at)
    WHERE status IN ('pending', 'waiting', 'running') AND concurrency_key IS NOT NULL;
-- The lanes' running runs (the slots in use).
CREATE INDEX runs_lane_running_idx ON runs (workflow, concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
-- The live runs of a FIFO key in start order.
CREATE INDEX runs_fifo_idx ON runs (workflow, fifo_key, created_at, id)
    WHERE status IN ('pending', 'waiting', 'running') AND fifo_key IS NOT NULL;
-- The starts of a rate-limit key (the tokens in use are the starts of the last period).
CREATE INDEX runs_rate_idx ON runs (workflow, rate_key, started_at)
    WHERE rate_key IS NOT NULL AND started_at IS NOT NULL;
-- The pending run of a debounce key.
CREATE INDEX runs_debounce_idx ON runs (workflow, debounce_key)
    WHERE status = 'pending' AND debounce_key IS NOT NULL;

CREATE TABLE schedules (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    workflow    text NOT NULL,
    cron        text NOT NULL,
    input       jsonb,
    timezone    text NOT NULL,
    catch_up    text NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    paused      boolean NOT NULL DEFAULT false,
    next_at     timestamptz NOT NULL,
    last_fired_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT perdure_now(),
    updated_at  timestamptz NOT NULL DEFAULT perdure_now()
);
CREATE INDEX schedules_due_idx ON schedules (next_at) WHERE NOT paused;

-- Where the last limited claim of a workflow stopped walking its lanes: the next one
-- starts after it, so with more keys than a claim takes every key gets its turn.
CREATE TABLE lane_cursors (
    workflow text PRIMARY KEY,
    lane     text NOT NULL
);
