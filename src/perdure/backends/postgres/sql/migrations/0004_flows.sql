-- DAG flows (DESIGN §6, pgflow's model on perdure's engine).
--
-- Shapes, fixed per version: flows (options), flow_steps (one row per step, in
-- definition order, which is topological: add_step requires dependencies to exist)
-- and flow_deps (the edges). A flow run is a runs row of kind 'flow' (status
-- 'running' from its start, available_at infinity: nothing claims it); each ready
-- step gets task rows, runs of kind 'task' parented to the flow run, workflow
-- '<flow>:<step>' (the colon never occurs in a workflow name), task_index the
-- element's index. Tasks go through the one claim path, lease, fence, heartbeat and
-- retry of every run. When a task ends, child_ended() hands it to flow_task_ended()
-- under the flow run's lock: flow_states is updated, the tasks of the steps that
-- became ready are inserted (flow_advance), and the flow run ends when nothing
-- remains or a task failed for good (then its other live tasks are cancelled, so
-- their late results are fenced out).

ALTER TABLE runs ADD COLUMN kind text NOT NULL DEFAULT 'workflow'
    CHECK (kind IN ('workflow', 'flow', 'task'));
ALTER TABLE runs ADD COLUMN task_index integer;

CREATE TABLE flows (
    name         text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$'),
    version      integer NOT NULL CHECK (version >= 1),
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    base_delay   double precision NOT NULL CHECK (base_delay >= 0),
    timeout      double precision NOT NULL CHECK (timeout > 0),
    created_at   timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE flow_steps (
    flow         text NOT NULL,
    version      integer NOT NULL,
    step         text NOT NULL CHECK (step ~ '^[A-Za-z0-9._-]{1,128}$'),
    step_index   integer NOT NULL,
    -- NULL: one task; 'run' or a dependency's name: one task per element of that list
    map_over     text,
    max_attempts integer CHECK (max_attempts >= 1),
    base_delay   double precision CHECK (base_delay >= 0),
    timeout      double precision CHECK (timeout > 0),
    PRIMARY KEY (flow, version, step),
    FOREIGN KEY (flow, version) REFERENCES flows (name, version) ON DELETE CASCADE
);

CREATE TABLE flow_deps (
    flow      text NOT NULL,
    version   integer NOT NULL,
    step      text NOT NULL,
    dep       text NOT NULL,
    dep_index integer NOT NULL,
    PRIMARY KEY (flow, version, step, dep),
    FOREIGN KEY (flow, version, step) REFERENCES flow_steps (flow, version, step)
        ON DELETE CASCADE,
    FOREIGN KEY (flow, version, dep) REFERENCES flow_steps (flow, version, step)
);

-- The state of each step of a flow run: created (waiting for dependencies), started
-- (tasks inserted), completed (output set), failed, cancelled.
CREATE TABLE flow_states (
    run_id          text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step            text NOT NULL,
    step_index      integer NOT NULL,
    status          text NOT NULL
        CHECK (status IN ('created', 'started', 'completed', 'failed', 'cancelled')),
    task_count      integer NOT NULL DEFAULT 0,
    remaining_tasks integer NOT NULL DEFAULT 0,
    output          json,
    error           jsonb,
    started_at      timestamptz,
    completed_at    timestamptz,
    PRIMARY KEY (run_id, step)
);

CREATE INDEX runs_tasks_idx ON runs (parent_id, parent_step, task_index) WHERE kind = 'task';
