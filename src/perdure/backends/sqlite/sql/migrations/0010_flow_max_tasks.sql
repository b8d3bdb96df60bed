-- Bounds on fan-out; the PostgreSQL migration of the same name explains the columns.
-- A map step creates at most max_tasks tasks: its own bound, else its flow's.

ALTER TABLE flows ADD COLUMN max_tasks INTEGER NOT NULL DEFAULT 10000 CHECK (max_tasks >= 1);
ALTER TABLE flow_steps ADD COLUMN max_tasks INTEGER CHECK (max_tasks >= 1);
