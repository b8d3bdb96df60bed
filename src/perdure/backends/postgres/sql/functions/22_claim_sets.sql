-- The parameter sets of the limited claim (queries.sql claim_runs_limited) as
-- functions the planner counts as small (ROWS 4): the claim's plan is prepared once
-- and reused (generic), where unnest's default guess of 100 rows per array would
-- multiply into plans that scan the backlog. SET search_path keeps them from being
-- inlined, which would bring the guess back.

-- The (workflow, version) pairs a worker serves.
CREATE OR REPLACE FUNCTION claim_served(p_workflows text[], p_versions integer[])
RETURNS TABLE (workflow text, version integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 4 SET search_path FROM CURRENT AS $$
    SELECT * FROM unnest(p_workflows, p_versions)
$$;

-- The limits of the served workflows that declare any.
CREATE OR REPLACE FUNCTION claim_limits(
    p_workflows text[], p_concurrency integer[], p_key_concurrency integer[],
    p_rate integer[], p_period double precision[], p_fifo boolean[]
)
RETURNS TABLE (workflow text, concurrency integer, key_concurrency integer, rate integer,
               period double precision, fifo boolean)
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 2 SET search_path FROM CURRENT AS $$
    SELECT * FROM unnest(p_workflows, p_concurrency, p_key_concurrency, p_rate, p_period, p_fifo)
$$;
