-- Bounds on fan-out (docs/flows.md, "Bounds on fan-out"): a map step creates at most
-- max_tasks tasks. The flow's bound (default 10,000) applies to each of its map
-- steps; a map step may set its own (NULL: the flow's). Like a flow's other options
-- it is part of the shape, fixed per version. flow_advance() compares a ready map's
-- list length with it before inserting anything: a longer list fails the run.

ALTER TABLE flows ADD COLUMN max_tasks integer NOT NULL DEFAULT 10000 CHECK (max_tasks >= 1);
ALTER TABLE flow_steps ADD COLUMN max_tasks integer CHECK (max_tasks >= 1);

-- create_flow() and add_step() gained max_tasks: drop the old signatures so the new
-- ones replace them instead of standing beside them.
DROP FUNCTION IF EXISTS create_flow(text, integer, double precision, double precision, integer);
DROP FUNCTION IF EXISTS add_step(
    text, text, text[], integer, double precision, double precision, text, text, integer);
