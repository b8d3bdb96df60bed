-- Flow control on DAG flow steps (docs/flows.md, "Flow control on steps").
--
-- A step's limits are part of its flow's shape, fixed per version like its other
-- options: concurrency, key_concurrency, rate_limit (starts per rate_period seconds),
-- and whether it has a rate-limit key (rate_keyed) and a FIFO key (fifo) function.
-- The key functions are Python: they run once, when a flow run is started from
-- Python, on the run's input, and their keys are stored per (run, step) in
-- flow_states; flow_advance() copies them into each task row it inserts, so the
-- limited claim enforces them on tasks as on workflow runs. A run started without
-- the key functions (from SQL) gives a limited step's tasks the step's one lane ''
-- (rate key '' under a rate limit, no FIFO key).

ALTER TABLE flow_steps
    ADD COLUMN concurrency     integer CHECK (concurrency >= 1),
    ADD COLUMN key_concurrency integer CHECK (key_concurrency >= 1),
    ADD COLUMN rate_limit      integer CHECK (rate_limit >= 1),
    ADD COLUMN rate_period     double precision CHECK (rate_period > 0),
    ADD COLUMN rate_keyed      boolean NOT NULL DEFAULT false,
    ADD COLUMN fifo            boolean NOT NULL DEFAULT false;

-- The keys of a run's tasks of that step (NULL: the step is not limited).
ALTER TABLE flow_states
    ADD COLUMN concurrency_key text,
    ADD COLUMN fifo_key        text,
    ADD COLUMN rate_key        text;

-- start_flow_run() gained p_keys: drop the old signature so the new one replaces it.
DROP FUNCTION IF EXISTS start_flow_run(text, text, integer, jsonb, integer, text, integer);
