-- Flow control and schedules (DESIGN.md §10); the PostgreSQL migration of the same
-- number explains the columns. Claims on SQLite are serialized by BEGIN IMMEDIATE,
-- so the limited claim counts from these indexes without a lock of its own.

ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE runs ADD COLUMN fifo_key TEXT;
ALTER TABLE runs ADD COLUMN rate_key TEXT;
ALTER TABLE runs ADD COLUMN debounce_key TEXT;

CREATE INDEX runs_lane_idx ON runs (workflow, concurrency_key, priority, available_at, id)
    WHERE status IN ('pending', 'waiting', 'running') AND concurrency_key IS NOT NULL;
CREATE INDEX runs_lane_running_idx ON runs (workflow, concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX runs_fifo_idx ON runs (workflow, fifo_key, created_at, id)
    WHERE status IN ('pending', 'waiting', 'running') AND fifo_key IS NOT NULL;
CREATE INDEX runs_rate_idx ON runs (workflow, rate_key, started_at)
    WHERE rate_key IS NOT NULL AND started_at IS NOT NULL;
CREATE INDEX runs_debounce_idx ON runs (workflow, debounce_key)
    WHERE status = 'pending' AND debounce_key IS NOT NULL;

CREATE TABLE schedules (
    name          TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    cron          TEXT NOT NULL,
    input         TEXT,
    timezone      TEXT NOT NULL,
    catch_up      TEXT NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    paused        INTEGER NOT NULL DEFAULT 0,
    next_at       REAL NOT NULL,
    last_fired_at REAL,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);
CREATE INDEX schedules_due_idx ON schedules (next_at) WHERE paused = 0;
