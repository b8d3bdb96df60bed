-- DAG flows (DESIGN §6; the same tables as PostgreSQL's 0004_flows.sql).
--
-- Shapes, fixed per version: flows (options), flow_steps (one row per step, in
-- definition order, which is topological) and flow_deps (the edges). A flow run is a
-- runs row of kind 'flow' (status 'running' from its start, available_at infinity:
-- nothing claims it); each ready step gets task rows, runs of kind 'task' parented
-- to the flow run, workflow '<flow>:<step>', task_index the element's index. Tasks
-- go through the one claim path, lease, fence, heartbeat and retry of every run; the
-- transaction that ends a task updates flow_states, inserts the tasks of the steps
-- that became ready, and ends the flow run when nothing remains or a task failed for
-- good (then the flow's other live tasks are cancelled, so their late results are
-- fenced out).

ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'workflow'
    CHECK (kind IN ('workflow', 'flow', 'task'));
ALTER TABLE runs ADD COLUMN task_index INTEGER;

CREATE TABLE flows (
    name         TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 1),
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    base_delay   REAL NOT NULL CHECK (base_delay >= 0),
    timeout      REAL NOT NULL CHECK (timeout > 0),
    created_at   REAL NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE TABLE flow_steps (
    flow         TEXT NOT NULL,
    version      INTEGER NOT NULL,
    step         TEXT NOT NULL,
    step_index   INTEGER NOT NULL,
    -- NULL: one task; 'run' or a dependency's name: one task per element of that list
    map_over     TEXT,
    max_attempts INTEGER CHECK (max_attempts >= 1),
    base_delay   REAL CHECK (base_delay >= 0),
    timeout      REAL CHECK (timeout > 0),
    PRIMARY KEY (flow, version, step),
    FOREIGN KEY (flow, version) REFERENCES flows (name, version) ON DELETE CASCADE
);

CREATE TABLE flow_deps (
    flow      TEXT NOT NULL,
    version   INTEGER NOT NULL,
    step      TEXT NOT NULL,
    dep       TEXT NOT NULL,
    dep_index INTEGER NOT NULL,
    PRIMARY KEY (flow, version, step, dep),
    FOREIGN KEY (flow, version, step) REFERENCES flow_steps (flow, version, step)
        ON DELETE CASCADE,
    FOREIGN KEY (flow, version, dep) REFERENCES flow_steps (flow, version, step)
);

-- The state of each step of a flow run: created (waiting for dependencies), started
-- (tasks inserted), completed (output set), failed, cancelled.
CREATE TABLE flow_states (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step            TEXT NOT NULL,
    step_index      INTEGER NOT NULL,
    status          TEXT NOT NULL
        CHECK (status IN ('created', 'started', 'completed', 'failed', 'cancelled')),
    task_count      INTEGER NOT NULL DEFAULT 0,
    remaining_tasks INTEGER NOT NULL DEFAULT 0,
    output          TEXT,
    error           TEXT,
    started_at      REAL,
    completed_at    REAL,
    PRIMARY KEY (run_id, step)
);

CREATE INDEX runs_tasks_idx ON runs (parent_id, parent_step, task_index) WHERE kind = 'task';
