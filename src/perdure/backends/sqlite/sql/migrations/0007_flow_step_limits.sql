-- Flow control on DAG flow steps; the PostgreSQL migration of the same number
-- explains the columns. A step's limits are part of its flow's shape; the keys of a
-- run's tasks are stored per (run, step) and copied into each task row.

ALTER TABLE flow_steps ADD COLUMN concurrency INTEGER CHECK (concurrency >= 1);
ALTER TABLE flow_steps ADD COLUMN key_concurrency INTEGER CHECK (key_concurrency >= 1);
ALTER TABLE flow_steps ADD COLUMN rate_limit INTEGER CHECK (rate_limit >= 1);
ALTER TABLE flow_steps ADD COLUMN rate_period REAL CHECK (rate_period > 0);
ALTER TABLE flow_steps ADD COLUMN rate_keyed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE flow_steps ADD COLUMN fifo INTEGER NOT NULL DEFAULT 0;

ALTER TABLE flow_states ADD COLUMN concurrency_key TEXT;
ALTER TABLE flow_states ADD COLUMN fifo_key TEXT;
ALTER TABLE flow_states ADD COLUMN rate_key TEXT;
