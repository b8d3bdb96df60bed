-- The runs a limited claim may take (queries.sql claim_runs_limited; DESIGN.md §10),
-- chosen step by step so each statement is small and keeps its cached plan: one
-- planned statement for all of this cost more to plan than to run.
--
-- For each limited workflow: its runs whose lease expired (they hold their slot: taken
-- back first); then, lane by lane (a skip scan of runs_lane_idx, starting after the
-- lane where the previous claim stopped, wrapping around, and stopping once p_limit
-- lanes offered a run of the best due priority), the lane's first due runs within its key_concurrency and, for
-- a FIFO workflow, only the oldest live run of a FIFO key. Those go round-robin
-- (priority, then lane rank, then due time) through the rate limit (starts of the
-- last period per rate key) and the workflow's concurrency, up to p_limit.
--
-- The counts are exact: the function first takes the advisory lock that serializes
-- the limited claims of this schema (held to the end of the claim's transaction), and
-- as a VOLATILE function each of its statements reads a fresh snapshot, taken after
-- the lock, that sees every earlier limited claim. Racing workers never overshoot a
-- limit. (The calling statement's own snapshot is older: a run it then locks was
-- rechecked on its newest version, so one another claim took is skipped.)
--
-- A workflow whose only limit is its concurrency has one lane ('') and needs no walk:
-- its first due runs, up to the slots it has left, in one statement.
--
-- The statements run with generic plans: their parameters change on every call, and
-- a custom plan per call (PostgreSQL's choice for most of them) cost more to plan
-- than to run.
CREATE OR REPLACE FUNCTION limited_candidates(
    p_workflows text[], p_versions integer[], p_limit integer,
    p_l_workflows text[], p_l_concurrency integer[], p_l_key_concurrency integer[],
    p_l_rate integer[], p_l_period double precision[], p_l_fifo boolean[]
)
RETURNS TABLE (id text, priority integer, lane_rank bigint, available_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER ROWS 10 SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now timestamptz := perdure_now();
    v_lim record;
    v_lane text;
    v_lane_running bigint;
    v_versions integer[];
    v_wf_running bigint;
    v_wf_taken bigint;
    v_cand record;
    v_used bigint;
    v_rate_used jsonb;
    v_taken integer := 0;
    v_ids text[];
    v_prios integer[];
    v_ranks bigint[];
    v_dues timestamptz[];
    v_rate_keys text[];
    v_firsts boolean[];
    v_more record;
    v_start text;
    v_first text;
    v_last text;
    v_offering integer;
    v_top integer;
    v_heads integer[];
    v_count integer;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('perdure.claim-limits:' || current_schema(), 0));
    FOR v_lim IN
        SELECT * FROM unnest(p_l_workflows, p_l_concurrency, p_l_key_concurrency, p_l_rate,
                             p_l_period, p_l_fifo)
            AS l(workflow, concurrency, key_concurrency, rate, period, fifo)
    LOOP
        SELECT array_agg(s.version) INTO v_versions
        FROM unnest(p_workflows, p_versions) AS s(workflow, version)
        WHERE s.workflow = v_lim.workflow;
        -- Runs whose worker died hold their slot: always taken back.
        RETURN QUERY
            SELECT r.id, r.priority, 0::bigint, r.available_at
            FROM runs r
            WHERE r.workflow = v_lim.workflow AND r.concurrency_key IS NOT NULL
              AND r.status = 'running' AND r.available_at <= v_now
              AND r.version = ANY(v_versions);
        v_lane := NULL;
        IF v_lim.key_concurrency IS NULL AND v_lim.rate IS NULL AND NOT v_lim.fifo THEN
            -- Runs started under keyed limits the workflow no longer declares?
            v_lane := (SELECT r.concurrency_key FROM runs r
                       WHERE r.workflow = v_lim.workflow
                         AND r.status IN ('pending', 'waiting', 'running')
                         AND r.concurrency_key > ''
                       ORDER BY r.concurrency_key LIMIT 1);
        END IF;
        IF v_lim.key_concurrency IS NULL AND v_lim.rate IS NULL AND NOT v_lim.fifo
           AND v_lane IS NULL THEN
            -- Only the workflow's concurrency, one lane: no walk, no round-robin.
            v_wf_running := 0;
            IF v_lim.concurrency IS NOT NULL THEN
                SELECT count(*) INTO v_wf_running FROM runs x
                WHERE x.workflow = v_lim.workflow AND x.concurrency_key = ''
                  AND x.status = 'running';
            END IF;
            RETURN QUERY
                SELECT r.id, r.priority, 1::bigint, r.available_at
                FROM runs r
                WHERE r.workflow = v_lim.workflow AND r.concurrency_key = ''
                  AND r.status IN ('pending', 'waiting', 'running')
                  AND r.status <> 'running'
                  AND r.available_at <= v_now
                  AND (r.version IS NULL OR r.version = ANY(v_versions))
                ORDER BY r.priority, r.available_at
                LIMIT greatest(0, least(p_limit - v_taken,
                                        coalesce(v_lim.concurrency - v_wf_running, p_limit)));
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_taken := v_taken + v_count;
            CONTINUE;
        END IF;
        v_ids := '{}'; v_prios := '{}'; v_ranks := '{}'; v_dues := '{}';
        v_rate_keys := '{}'; v_firsts := '{}';
        -- Lane by lane: a skip scan over the lanes with live runs, from the cursor on.
        v_start := (SELECT c.lane FROM lane_cursors c WHERE c.workflow = v_lim.workflow);
        v_lane := NULL;
        IF v_start IS NOT NULL THEN
            v_lane := (SELECT r.concurrency_key FROM runs r
                       WHERE r.workflow = v_lim.workflow
                         AND r.status IN ('pending', 'waiting', 'running')
                         AND r.concurrency_key > v_start
                       ORDER BY r.concurrency_key LIMIT 1);
        END IF;
        IF v_lane IS NULL THEN  -- no cursor ('' is a lane too), or none after it
            v_lane := (SELECT r.concurrency_key FROM runs r
                       WHERE r.workflow = v_lim.workflow
                         AND r.status IN ('pending', 'waiting', 'running')
                         AND r.concurrency_key IS NOT NULL
                       ORDER BY r.concurrency_key LIMIT 1);
        END IF;
        v_first := v_lane;
        v_last := NULL;
        v_heads := '{}';  -- the best priority each lane offered
        v_offering := 0;  -- lanes that offered a run of the workflow's best due priority
        v_top := NULL;    -- that priority, read once enough lanes offered runs
        WHILE v_lane IS NOT NULL LOOP
            v_lane_running := 0;
            IF v_lim.key_concurrency IS NOT NULL THEN
                SELECT count(*) INTO v_lane_running FROM runs x
                WHERE x.workflow = v_lim.workflow AND x.concurrency_key = v_lane
                  AND x.status = 'running';
            END IF;
            IF v_lim.key_concurrency IS NULL OR v_lane_running < v_lim.key_concurrency THEN
                SELECT array_agg(c.id ORDER BY c.n) AS ids,
                       array_agg(c.priority ORDER BY c.n) AS prios,
                       array_agg(c.n ORDER BY c.n) AS ranks,
                       array_agg(c.available_at ORDER BY c.n) AS dues,
                       array_agg(c.rate_key ORDER BY c.n) AS rate_keys,
                       array_agg(c.started_at IS NULL ORDER BY c.n) AS firsts
                INTO v_more
                FROM (
                    SELECT d.*, row_number() OVER (ORDER BY d.priority, d.available_at, d.id) AS n
                    FROM (
                    SELECT r.id, r.priority, r.available_at, r.rate_key, r.started_at
                    FROM runs r
                    WHERE r.workflow = v_lim.workflow AND r.concurrency_key = v_lane
                      AND r.status IN ('pending', 'waiting', 'running')
                      AND r.status <> 'running'
                      AND r.available_at <= v_now
                      AND (r.version IS NULL OR r.version = ANY(v_versions))
                      AND (NOT v_lim.fifo OR r.fifo_key IS NULL OR NOT EXISTS (
                            SELECT 1 FROM runs o
                            WHERE o.workflow = r.workflow AND o.fifo_key = r.fifo_key
                              AND o.status IN ('pending', 'waiting', 'running')
                              AND o.id <> r.id
                              AND ((o.created_at, o.id) < (r.created_at, r.id)
                                   OR o.status = 'running')))
                    ORDER BY r.priority, r.available_at
                    LIMIT CASE WHEN v_lim.key_concurrency IS NULL THEN p_limit
                               ELSE least(p_limit, v_lim.key_concurrency - v_lane_running) END
                    ) d
                ) c;
                IF v_more.ids IS NOT NULL THEN
                    v_heads := v_heads || v_more.prios[1];
                    IF v_top IS NULL AND cardinality(v_heads) >= p_limit THEN
                        v_top := (SELECT r.priority FROM runs r
                                  WHERE r.workflow = v_lim.workflow
                                    AND r.concurrency_key IS NOT NULL
                                    AND r.status IN ('pending', 'waiting', 'running')
                                    AND r.status <> 'running' AND r.available_at <= v_now
                                  ORDER BY r.priority, r.available_at LIMIT 1);
                    END IF;
                    IF v_top IS NOT NULL THEN
                        v_offering := (SELECT count(*) FROM unnest(v_heads) AS h WHERE h <= v_top);
                    END IF;
                    v_ids := v_ids || v_more.ids;
                    v_prios := v_prios || v_more.prios;
                    v_ranks := v_ranks || v_more.ranks;
                    v_dues := v_dues || v_more.dues;
                    v_rate_keys := v_rate_keys || v_more.rate_keys;
                    v_firsts := v_firsts || v_more.firsts;
                END IF;
            END IF;
            v_last := v_lane;
            EXIT WHEN v_offering >= p_limit;
            v_lane := (SELECT r.concurrency_key FROM runs r
                       WHERE r.workflow = v_lim.workflow
                         AND r.status IN ('pending', 'waiting', 'running')
                         AND r.concurrency_key > v_lane
                       ORDER BY r.concurrency_key LIMIT 1);
            EXIT WHEN v_lane IS NULL AND v_start IS NULL;  -- began at the first lane
            IF v_lane IS NULL THEN  -- wrap around to the first lane
                v_lane := (SELECT r.concurrency_key FROM runs r
                           WHERE r.workflow = v_lim.workflow
                             AND r.status IN ('pending', 'waiting', 'running')
                             AND r.concurrency_key IS NOT NULL
                           ORDER BY r.concurrency_key LIMIT 1);
            END IF;
            EXIT WHEN v_lane = v_first;
        END LOOP;
        IF v_last IS NOT NULL AND v_offering >= p_limit THEN
            INSERT INTO lane_cursors AS c (workflow, lane) VALUES (v_lim.workflow, v_last)
            ON CONFLICT (workflow) DO UPDATE SET lane = excluded.lane;
        END IF;
        -- Round-robin across lanes, through the rate limit and the workflow's concurrency.
        v_wf_running := 0;
        IF v_lim.concurrency IS NOT NULL THEN
            SELECT count(*) INTO v_wf_running FROM runs x
            WHERE x.workflow = v_lim.workflow AND x.concurrency_key IS NOT NULL
              AND x.status = 'running';
        END IF;
        v_wf_taken := 0;
        v_rate_used := '{}';
        FOR v_cand IN
            SELECT * FROM unnest(v_ids, v_prios, v_ranks, v_dues, v_rate_keys, v_firsts)
                AS c(id, priority, lane_rank, available_at, rate_key, first_start)
            ORDER BY c.priority, c.lane_rank, c.available_at, c.id
        LOOP
            EXIT WHEN v_taken >= p_limit;
            EXIT WHEN v_lim.concurrency IS NOT NULL
                      AND v_wf_running + v_wf_taken >= v_lim.concurrency;
            IF v_lim.rate IS NOT NULL AND v_cand.rate_key IS NOT NULL AND v_cand.first_start THEN
                IF NOT v_rate_used ? v_cand.rate_key THEN
                    SELECT count(*) INTO v_used FROM runs x
                    WHERE x.workflow = v_lim.workflow AND x.rate_key = v_cand.rate_key
                      AND x.started_at IS NOT NULL
                      AND x.started_at > v_now - make_interval(secs => v_lim.period);
                    v_rate_used := v_rate_used || jsonb_build_object(v_cand.rate_key, v_used);
                END IF;
                v_used := (v_rate_used ->> v_cand.rate_key)::bigint;
                CONTINUE WHEN v_used >= v_lim.rate;
                v_rate_used := v_rate_used || jsonb_build_object(v_cand.rate_key, v_used + 1);
            END IF;
            v_wf_taken := v_wf_taken + 1;
            v_taken := v_taken + 1;
            id := v_cand.id;
            priority := v_cand.priority;
            lane_rank := v_cand.lane_rank;
            available_at := v_cand.available_at;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;
