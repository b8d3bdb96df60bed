-- The parameter sets of the limited claim (queries.sql claim_runs_limited) as
-- functions the planner counts as small (ROWS 4): the claim's plan is prepared once
-- and reused (generic), where unnest's default guess of 100 rows per array would
-- multiply into plans that scan the backlog. PL/pgSQL keeps them from being inlined,
-- which would bring the guess back (and, unlike a SQL function with a SET clause, is
-- not planned again on every call).

-- The (workflow, version) pairs a worker serves.
CREATE OR REPLACE FUNCTION claim_served(p_workflows text[], p_versions integer[])
RETURNS TABLE (workflow text, version integer)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE ROWS 4 SET search_path FROM CURRENT AS $$
BEGIN
    RETURN QUERY SELECT * FROM unnest(p_workflows, p_versions);
END
$$;

-- The runs a limited claim also looks for on one claim in eight (p_scan > 0): runs
-- with a lane of the workflows served without limits (started under limits since
-- removed), workflow by workflow through the lane index; and runs without a lane of
-- the limited workflows (started before their limits were declared), among the first
-- p_scan due runs. A function so the claim's own text stays under psycopg's 4 KB
-- parse cache (tests/backends/test_postgres_claim_statements.py).
CREATE OR REPLACE FUNCTION claim_strays(
    p_workflows text[], p_versions integer[], p_plain text[], p_limited text[],
    p_limit integer, p_scan integer
)
RETURNS TABLE (id text, priority integer, lane_rank bigint, available_at timestamptz)
LANGUAGE plpgsql STABLE ROWS 4 SET search_path FROM CURRENT AS $$
BEGIN
    IF p_scan <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT k.id, k.priority, 1::bigint, k.available_at
        FROM unnest(p_plain) AS w(workflow)
        CROSS JOIN LATERAL (
            SELECT r.id, r.priority, r.available_at
            FROM runs r
            WHERE r.workflow = w.workflow
              AND r.status IN ('pending', 'waiting', 'running')
              AND r.concurrency_key IS NOT NULL
              AND r.available_at <= perdure_now()
              AND (r.version IS NULL OR (r.workflow, r.version) IN (
                    SELECT s.workflow, s.version FROM claim_served(p_workflows, p_versions) s))
            ORDER BY r.concurrency_key, r.priority, r.available_at
            LIMIT p_limit
        ) k;
    RETURN QUERY
        SELECT q.id, q.priority, 1::bigint, q.available_at
        FROM (
            SELECT r.id, r.priority, r.available_at, r.workflow
            FROM runs r
            WHERE r.status IN ('pending', 'waiting', 'running')
              AND r.concurrency_key IS NULL
              AND r.available_at <= perdure_now()
              AND ((r.workflow, r.version) IN (
                      SELECT s.workflow, s.version FROM claim_served(p_workflows, p_versions) s)
                   OR (r.version IS NULL AND r.workflow = ANY(p_workflows)))
            ORDER BY r.priority, r.available_at
            LIMIT p_scan
        ) q
        WHERE q.workflow = ANY(p_limited);
END
$$;
