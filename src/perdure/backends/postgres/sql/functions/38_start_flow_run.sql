-- DAG flows (internal): starting a flow run.

-- Start a run of flow p_flow at p_version (NULL: its highest stored version) as
-- create_run() starts a workflow's (ids and idempotency keys alike): the run (kind
-- 'flow', status 'running', never claimed itself), one state per step, and the
-- tasks of the ready steps (flow_advance). PD001 if no such flow is stored.
-- p_keys: the task keys of limited steps whose key functions ran (a start from
-- Python), {"<step>": [lane, fifo_key, rate_key]}; a limited step without an entry
-- (every one, from SQL) gets the lane '' under its step-wide limits: rate key '' if
-- it has a rate limit, no FIFO key.
-- p_copied: a fork's steps completed from the start, {"<step>": <output>}; p_origin:
-- what its 'created' event adds (forked_from, from_step, by).
CREATE OR REPLACE FUNCTION start_flow_run(
    p_id text, p_flow text, p_version integer, p_input jsonb, p_priority integer,
    p_idempotency_key text, p_retention_days integer, p_keys jsonb DEFAULT NULL,
    p_copied jsonb DEFAULT NULL, p_origin jsonb DEFAULT NULL,
    OUT created boolean, OUT run runs
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_version integer;
    v_result record;
BEGIN
    SELECT f.version INTO v_version FROM flows f
    WHERE f.name = p_flow AND (p_version IS NULL OR f.version = p_version)
    ORDER BY f.version DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%', format(
            'no flow %s%s is stored: define it with app.flow(...) or perdure.create_flow first',
            quote_nullable(left(p_flow, 200)),
            CASE WHEN p_version IS NULL THEN '' ELSE ' version ' || p_version END)
            USING ERRCODE = 'PD001';
    END IF;
    PERFORM check_start(p_id, p_idempotency_key, p_input, p_priority, p_retention_days);
    -- The run as it lives (running, never due: its tasks are claimed, not it) in one
    -- insert, with its created event. No wake notice: flow_advance() sends the one for
    -- the tasks it starts.
    INSERT INTO runs (id, workflow, version, status, input, priority, idempotency_key,
                      available_at, retention_days, kind, started_at)
    VALUES (p_id, p_flow, v_version, 'running', p_input, p_priority, p_idempotency_key,
            'infinity', p_retention_days, 'flow', perdure_now())
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        created := true;
        INSERT INTO events (run_id, type, data)
        VALUES (p_id, 'created', jsonb_build_object('workflow', p_flow, 'version', v_version)
                                 || coalesce(p_origin, '{}'));
    ELSE
        -- The id or key is taken: create_run() returns the run that holds it (and
        -- records a differing input), or creates the run if that one is gone again.
        SELECT * INTO v_result FROM create_run(
            p_id, p_flow, v_version, p_input, p_priority, p_idempotency_key,
            p_retention_days => p_retention_days);
        created := v_result.created;
        run := v_result.run;
        IF NOT created THEN
            RETURN;
        END IF;
        UPDATE runs SET kind = 'flow', status = 'running', available_at = 'infinity',
            started_at = perdure_now()
        WHERE id = p_id;
    END IF;
    INSERT INTO flow_states (run_id, step, step_index, status, concurrency_key, fifo_key,
                             rate_key, remaining_deps)
    SELECT p_id, fs.step, fs.step_index, 'created', k.lane, k.fifo, k.rate,
           (SELECT count(*) FROM flow_deps d
            WHERE d.flow = fs.flow AND d.version = fs.version AND d.step = fs.step)
    FROM flow_steps fs
    CROSS JOIN LATERAL (
        SELECT fs.concurrency IS NOT NULL OR fs.key_concurrency IS NOT NULL
               OR fs.rate_limit IS NOT NULL OR fs.fifo AS limited,
               p_keys -> fs.step AS given
    ) l
    CROSS JOIN LATERAL (
        SELECT CASE WHEN NOT l.limited THEN NULL
                    WHEN l.given IS NULL THEN ''
                    ELSE l.given ->> 0 END AS lane,
               CASE WHEN l.limited AND l.given IS NOT NULL THEN l.given ->> 1 END AS fifo,
               CASE WHEN NOT l.limited OR fs.rate_limit IS NULL THEN NULL
                    WHEN l.given IS NULL THEN ''
                    ELSE l.given ->> 2 END AS rate
    ) k
    WHERE fs.flow = p_flow AND fs.version = v_version;
    IF p_copied IS NOT NULL THEN  -- a fork: what it keeps is completed, the rest waits less
        UPDATE flow_states SET status = 'completed', output = (p_copied -> step)::json,
            started_at = perdure_now(), completed_at = perdure_now()
        WHERE run_id = p_id AND p_copied ? step;
        UPDATE flow_states st SET remaining_deps = (
            SELECT count(*) FROM flow_deps d
            WHERE d.flow = p_flow AND d.version = v_version AND d.step = st.step
              AND NOT p_copied ? d.dep)
        WHERE st.run_id = p_id AND st.status = 'created';
    END IF;
    PERFORM flow_advance(p_id);
    SELECT * INTO run FROM runs WHERE id = p_id;
END
$$;
