-- DAG flows from SQL, any language (DESIGN §6): a task worker's three calls.

-- Claim up to `qty` due tasks of flow `flow` (only of `steps` when given) for
-- `worker`, through the same fenced lease as every claim: each gets a new
-- lease_token, which complete_task / fail_task must present. `lease` seconds
-- (default: the step's timeout plus 5); a task whose lease lapses is claimable again.
-- `input` is {"run": <run input>, <dep>: <output>...}, or a map task's element;
-- `attempt` counts from 1; a task whose lease lapsed counts that attempt (a timeout),
-- and one whose last attempt lapsed fails (and so does its run) instead of returning.
-- Example: SELECT * FROM perdure.claim_tasks('analyze_website', 'node-1', qty => 5, steps => ARRAY['sentiment']);
CREATE OR REPLACE FUNCTION claim_tasks(
    flow text, worker text, qty integer DEFAULT 1, lease double precision DEFAULT NULL,
    steps text[] DEFAULT NULL
) RETURNS TABLE (run_id text, step text, task_index integer, input jsonb, attempt integer,
                 lease_token bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v_task record;
    v_error jsonb;
BEGIN
    IF claim_tasks.worker IS NULL OR length(claim_tasks.worker) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'worker must be 1-255 characters' USING ERRCODE = 'PD001';
    END IF;
    IF claim_tasks.qty IS NULL OR claim_tasks.qty < 1 OR claim_tasks.qty > 1000 THEN
        RAISE EXCEPTION 'qty must be between 1 and 1000, got %', quote_nullable(claim_tasks.qty)
            USING ERRCODE = 'PD001';
    END IF;
    IF claim_tasks.lease IS NOT NULL
       AND NOT (claim_tasks.lease > 0 AND claim_tasks.lease <= 31536000) THEN
        RAISE EXCEPTION 'lease must be more than 0 seconds and at most a year, got %',
            claim_tasks.lease USING ERRCODE = 'PD001';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM flows f WHERE f.name = claim_tasks.flow) THEN
        RAISE EXCEPTION 'no flow % is stored', quote_nullable(left(claim_tasks.flow, 200))
            USING ERRCODE = 'PD001';
    END IF;
    FOR v_task IN
    WITH served AS (
        SELECT DISTINCT s.flow || ':' || s.step AS workflow
        FROM flow_steps s
        WHERE s.flow = claim_tasks.flow
          AND (claim_tasks.steps IS NULL OR s.step = ANY (claim_tasks.steps))
    ),
    keyless AS (
        -- Tasks without a lane through the claim index; tasks of limited steps (which
        -- SQL workers do not limit) step by step through the lane index.
        SELECT r.id, r.priority, r.available_at
        FROM runs r
        WHERE r.status IN ('pending', 'waiting', 'running')
          AND r.concurrency_key IS NULL
          AND r.available_at <= perdure_now()
          AND r.kind = 'task'
          AND r.workflow IN (SELECT workflow FROM served)
        ORDER BY r.priority, r.available_at
        LIMIT claim_tasks.qty
        FOR UPDATE OF r SKIP LOCKED
    ),
    keyed AS (
        SELECT k.id, k.priority, k.available_at
        FROM served w
        CROSS JOIN LATERAL (
            SELECT r.id, r.priority, r.available_at
            FROM runs r
            WHERE r.workflow = w.workflow
              AND r.status IN ('pending', 'waiting', 'running')
              AND r.concurrency_key IS NOT NULL
              AND r.available_at <= perdure_now()
              AND r.kind = 'task'
            ORDER BY r.concurrency_key, r.priority, r.available_at
            LIMIT claim_tasks.qty
            FOR UPDATE OF r SKIP LOCKED) k
    ),
    picked AS (SELECT * FROM keyless UNION ALL SELECT * FROM keyed),
    due AS (
        SELECT r.id, r.status AS previous_status, r.lease_owner AS previous_owner,
               coalesce(claim_tasks.lease,
                        coalesce(fs.timeout, f.timeout) + 5) AS lease_seconds,
               coalesce(fs.max_attempts, f.max_attempts) AS max_attempts
        FROM picked p
        JOIN runs r ON r.id = p.id
        JOIN flow_steps fs ON fs.flow = claim_tasks.flow AND fs.version = r.version
                          AND fs.step = r.parent_step
        JOIN flows f ON f.name = fs.flow AND f.version = fs.version
        ORDER BY p.priority, p.available_at
        LIMIT claim_tasks.qty
    ),
    claimed AS (
        UPDATE runs AS r SET
            status = 'running',
            -- a lapsed lease counts as an attempt (a timeout): this claim is the next
            attempt = r.attempt + CASE WHEN due.previous_status = 'running' THEN 1 ELSE 0 END,
            -- 64 random bits, as claim_runs' (docs/storage.md)
            lease_token = uuid_hash_extended(gen_random_uuid(), 0),
            lease_owner = claim_tasks.worker,
            lease_expires_at = perdure_now() + make_interval(secs => due.lease_seconds),
            available_at = perdure_now() + make_interval(secs => due.lease_seconds),
            started_at = coalesce(r.started_at, perdure_now()),
            wake_reason = NULL,
            claims_since_progress = r.claims_since_progress + 1,
            updated_at = perdure_now()
        FROM due
        WHERE r.id = due.id
        RETURNING r.*, due.previous_status, due.previous_owner, due.max_attempts
    ),
    logged AS (
        INSERT INTO events (run_id, type, data)
        SELECT c.id, 'lease_expired', jsonb_build_object('worker', c.previous_owner)
        FROM claimed c
        WHERE c.previous_status = 'running'
        UNION ALL
        SELECT c.id, 'claimed',
               jsonb_build_object('worker', claim_tasks.worker)
        FROM claimed c
    )
    SELECT c.id AS task_id, c.parent_id, c.parent_step, c.task_index, c.input, c.attempt,
           c.lease_token, c.max_attempts
    FROM claimed c
    ORDER BY c.priority, c.id
    LOOP
        IF v_task.attempt > v_task.max_attempts THEN
            -- the last attempt's lease lapsed: the task fails (and so does its run)
            v_error := jsonb_build_object(
                'type', 'TimeoutError', 'attempt', v_task.max_attempts,
                'message', format('the lease of step %L''s task lapsed on its last attempt',
                                  v_task.parent_step));
            PERFORM apply_transition(
                v_task.task_id, v_task.lease_token, '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                '{}', ARRAY['failed'],
                ARRAY[jsonb_build_object('type', 'TimeoutError',
                                         'message', v_error ->> 'message')::text],
                0, 'fail', NULL, NULL, NULL, v_error::text, '{}', '{}', '{}', '{}', NULL);
            CONTINUE;
        END IF;
        run_id := v_task.parent_id;
        step := v_task.parent_step;
        task_index := v_task.task_index;
        input := v_task.input;
        attempt := v_task.attempt;
        lease_token := v_task.lease_token;
        RETURN NEXT;
    END LOOP;
END
$$;
