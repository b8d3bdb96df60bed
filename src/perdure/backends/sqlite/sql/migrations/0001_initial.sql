-- perdure on SQLite: the initial schema.
--
-- One file holds every run of every workflow. Several processes (workers, producers,
-- the CLI) may open it at once; WAL mode lets readers run beside the one writer, and
-- every write transaction starts with BEGIN IMMEDIATE so that the write lock is taken
-- before anything is read (no deferred read-then-write upgrade can fail half way).
-- Correctness comes from those transactions alone, never from locks inside a process.
--
-- Time is REAL seconds since the Unix epoch (UTC), taken from the backend's clock after
-- the write lock is held. JSON is TEXT, stored exactly as the engine encoded it; the
-- backend registers json_contains(doc, pattern) with PostgreSQL's jsonb @> rules for
-- the containment filters (wait matches, buffered signals, list_runs input_match).
--
-- The life of a run
-- -----------------
-- create_run (or publish, or a parent's transition for a child) inserts a runs row
-- with status 'pending' and available_at = when it may first run, plus a 'created'
-- event.
--
-- claim_runs picks due rows: status pending, waiting or running with
-- available_at <= now, lowest priority first, oldest available_at next, through the
-- partial index runs_claim_idx. The claim makes the row 'running', bumps lease_token
-- (the fencing token), and sets lease_expires_at = available_at = now + lease. So a
-- worker that dies simply lets available_at pass: the same index hands the run to the
-- next claimer, which records 'lease_expired' before 'claimed'.
--
-- Every later write for the claim (apply, extend_leases) is fenced with
-- "WHERE id = ? AND lease_token = ? AND status = 'running'": a zombie worker whose lease
-- was taken over, or whose run was cancelled, writes nothing.
--
-- apply writes the journal (steps): one row per journal key. Completed and failed rows
-- are final; a 'retrying' row is replaced by the next write of its key. Writing a key
-- removes the run's wait on that key. The outcome of a transition then:
--   * Park     -> 'waiting', waits registered, available_at = the earliest of the wake
--                 time, the waits' timeouts and the deadline, or 1e18 ("infinity":
--                 only an event can wake it), or now if a wait is already satisfied
--                 (a buffered signal matched it, or its key has a journal row).
--   * Retry    -> 'waiting' with wake_reason 'retry', attempt + 1, available_at = wake.
--   * Release  -> 'waiting', claimable at once.
--   * Complete / Fail -> terminal; waits and buffered signals go; a parent (parent_id)
--                 gets its journal row parent_step written and becomes claimable now.
--
-- deliver_signal and publish resolve a matching wait into a completed 'wait' journal
-- row and make the run claimable now; a signal with no matching wait is buffered in
-- signals, oldest first, for the run's next matching wait. cancel_run ends a live run
-- and its live children.
--
-- sweep deletes terminal runs after their retention; steps, events, waits and signals
-- go with them (ON DELETE CASCADE; the backend turns foreign_keys on).
--
-- Beyond docs/storage.md: steps.event_mark records events' highest id when the row
-- was written, so get_events can merge derived step_completed events into the stored
-- trail in write order even when several writes share one timestamp.

CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    applied_at  REAL NOT NULL
);

CREATE TABLE runs (
    id                     TEXT PRIMARY KEY,
    workflow               TEXT NOT NULL,
    -- NULL until a worker serving the workflow claims the run (started by name before
    -- any process registered it): the claim fixes it.
    version                INTEGER,
    status                 TEXT NOT NULL
        CHECK (status IN ('pending', 'running', 'waiting', 'completed', 'failed', 'cancelled')),
    input                  TEXT NOT NULL,
    output                 TEXT,
    error                  TEXT,
    attempt                INTEGER NOT NULL DEFAULT 1,
    priority               INTEGER NOT NULL DEFAULT 100,
    idempotency_key        TEXT,
    parent_id              TEXT,
    parent_step            TEXT,
    available_at           REAL NOT NULL,
    wake_reason            TEXT
        CHECK (wake_reason IN ('sleep', 'event', 'retry', 'child', 'version', 'released')),
    lease_owner            TEXT,
    lease_token            INTEGER NOT NULL DEFAULT 0,
    lease_expires_at       REAL,
    deadline_at            REAL,
    retention_days         INTEGER NOT NULL DEFAULT 30,
    claims_since_progress  INTEGER NOT NULL DEFAULT 0,
    step_attempts          INTEGER NOT NULL DEFAULT 0,
    created_at             REAL NOT NULL,
    started_at             REAL,
    updated_at             REAL NOT NULL,
    completed_at           REAL
);

-- The one claim path: live runs by priority, then due time.
CREATE INDEX runs_claim_idx ON runs (priority, available_at, id)
    WHERE status IN ('pending', 'waiting', 'running');
-- Listings, newest first by created_at, the id breaking ties.
CREATE INDEX runs_created_idx ON runs (created_at, id);
CREATE INDEX runs_workflow_idx ON runs (workflow, created_at, id);
-- Retention sweeps of ended runs.
CREATE INDEX runs_retention_idx ON runs (completed_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
-- Children of a run (cancel cascades).
CREATE INDEX runs_parent_idx ON runs (parent_id) WHERE parent_id IS NOT NULL;
-- Idempotent starts; NULL keys may repeat.
CREATE UNIQUE INDEX runs_idempotency_idx ON runs (workflow, idempotency_key);

-- The journal. seq (the rowid) is the write order; (run_id, key) is unique.
CREATE TABLE steps (
    seq           INTEGER PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('run', 'sleep', 'wait', 'child', 'rollback')),
    status        TEXT NOT NULL CHECK (status IN ('completed', 'failed', 'retrying')),
    output        TEXT,
    error         TEXT,
    attempts      INTEGER NOT NULL DEFAULT 1,
    started_at    REAL,
    completed_at  REAL,
    recorded_at   REAL NOT NULL,
    event_mark    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (run_id, key)
);

-- The audit trail (step_completed entries are derived from steps, not stored). Ids
-- are never reused (AUTOINCREMENT), so steps.event_mark orders steps among events.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    type        TEXT NOT NULL,
    data        TEXT,
    created_at  REAL NOT NULL
);
CREATE INDEX events_run_idx ON events (run_id, id);

-- Registered wait_for_event calls that no signal has resolved yet.
CREATE TABLE waits (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    event       TEXT NOT NULL,
    match       TEXT,
    timeout_at  REAL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX waits_event_idx ON waits (event);

-- Signals buffered for a live run that was not (yet) waiting for them.
CREATE TABLE signals (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    event       TEXT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  REAL NOT NULL
);
CREATE INDEX signals_run_idx ON signals (run_id, event, id);

-- Signals delivered with an idempotency key, and what they answered.
CREATE TABLE signal_keys (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome IN ('resolved', 'buffered')),
    created_at  REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

-- Topic subscriptions: publish(event) starts a run of every workflow whose pattern
-- GLOB-matches the event name.
CREATE TABLE subscriptions (
    pattern     TEXT NOT NULL,
    workflow    TEXT NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (pattern, workflow)
) WITHOUT ROWID;

-- The workflow registry, for producers without the code.
CREATE TABLE workflows (
    name           TEXT NOT NULL,
    version        INTEGER NOT NULL,
    options        TEXT NOT NULL,
    registered_at  REAL NOT NULL,
    PRIMARY KEY (name, version)
) WITHOUT ROWID;

CREATE TABLE workers (
    id            TEXT PRIMARY KEY,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    workflows     TEXT NOT NULL,
    concurrency   INTEGER NOT NULL,
    started_at    REAL NOT NULL,
    last_seen_at  REAL NOT NULL,
    stopped_at    REAL
);

-- Idempotency of publish: the first call's result per key.
CREATE TABLE published (
    key         TEXT PRIMARY KEY,
    result      TEXT NOT NULL,
    created_at  REAL NOT NULL
);
