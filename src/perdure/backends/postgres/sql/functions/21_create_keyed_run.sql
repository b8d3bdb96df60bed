-- Starting a run under flow control (DESIGN.md §10; internal, called by the Python
-- client for a workflow that declares limits, or a debounced start).

-- Start a run as create_run() does and store its flow-control keys (computed by the
-- client at start: the lane, FIFO and rate-limit keys; see 0006_limits_schedules).
-- With p_debounce_key: if a run of the workflow started with that key is still
-- pending, it takes p_input and the new keys, becomes due p_debounce seconds from
-- now, records a 'debounced' event and is returned (created false); else a new run is
-- created, due p_debounce seconds from now. Debounced starts of one key take an
-- advisory lock, so two of them never both create.
CREATE OR REPLACE FUNCTION create_keyed_run(
    p_id text, p_workflow text, p_version integer, p_input jsonb,
    p_priority integer, p_idempotency_key text, p_delay double precision,
    p_run_at timestamptz, p_deadline_in double precision, p_deadline_at timestamptz,
    p_retention_days integer, p_parent_id text, p_parent_step text,
    p_concurrency_key text, p_fifo_key text, p_rate_key text,
    p_debounce_key text, p_debounce double precision, p_traceparent text DEFAULT NULL,
    OUT created boolean, OUT run runs
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_result record;
BEGIN
    PERFORM check_traceparent(p_traceparent);
    IF p_concurrency_key <> '' THEN  -- '' is the workflow's one lane
        PERFORM check_key('the concurrency key', p_concurrency_key);
    END IF;
    IF p_fifo_key IS NOT NULL THEN
        PERFORM check_key('the FIFO key', p_fifo_key);
    END IF;
    IF p_debounce_key IS NOT NULL THEN
        PERFORM check_key('the debounce key', p_debounce_key);
        IF p_debounce IS NULL OR NOT (p_debounce > 0 AND p_debounce < 'Infinity') THEN
            RAISE EXCEPTION 'invalid debounce %: expected a finite number of seconds > 0',
                quote_nullable(p_debounce) USING ERRCODE = 'PD001';
        END IF;
        PERFORM pg_advisory_xact_lock(
            hashtextextended('perdure.debounce:' || p_workflow || ':' || p_debounce_key, 0));
        UPDATE runs r SET
            input = p_input,
            available_at = perdure_now() + make_interval(secs => p_debounce),
            concurrency_key = p_concurrency_key,
            fifo_key = p_fifo_key,
            rate_key = p_rate_key,
            updated_at = perdure_now()
        WHERE r.workflow = p_workflow AND r.debounce_key = p_debounce_key
          AND r.status = 'pending'
        RETURNING * INTO run;
        IF FOUND THEN
            created := false;
            INSERT INTO events (run_id, type, data)
            VALUES (run.id, 'debounced', jsonb_build_object('debounce_key', p_debounce_key));
            PERFORM send_notice('w', run.id);
            RETURN;
        END IF;
    END IF;
    -- A new run is inserted with its keys in one row write (no update after the
    -- insert: a limited workflow's starts cost what other starts cost). The client
    -- validated every value; the table's checks guard the rest. A conflict (the id or
    -- the idempotency key exists) goes through create_run(), which finds the run.
    IF p_id IS NULL OR length(p_id) NOT BETWEEN 1 AND 255 OR p_input IS NULL
       OR p_workflow IS NULL OR p_priority IS NULL OR p_retention_days IS NULL THEN
        RAISE EXCEPTION 'invalid start of %', quote_nullable(left(p_workflow, 200))
            USING ERRCODE = 'PD001';
    END IF;
    INSERT INTO runs (id, workflow, version, status, input, priority, idempotency_key,
                      parent_id, parent_step, available_at, deadline_at, retention_days,
                      concurrency_key, fifo_key, rate_key, debounce_key, traceparent)
    VALUES (p_id, p_workflow, p_version, 'pending', p_input, p_priority, p_idempotency_key,
            p_parent_id, p_parent_step,
            coalesce(p_run_at, perdure_now() + make_interval(
                secs => CASE WHEN p_debounce_key IS NULL THEN coalesce(p_delay, 0)
                             ELSE p_debounce END)),
            coalesce(p_deadline_at, perdure_now() + make_interval(secs => p_deadline_in)),
            p_retention_days, p_concurrency_key, p_fifo_key, p_rate_key, p_debounce_key,
            p_traceparent)
    ON CONFLICT DO NOTHING
    RETURNING * INTO run;
    IF FOUND THEN
        created := true;
        INSERT INTO events (run_id, type, data)
        VALUES (p_id, 'created', jsonb_strip_nulls(jsonb_build_object(
            'workflow', p_workflow, 'version', p_version, 'parent_id', p_parent_id)));
        PERFORM send_notice('w', p_id);
        RETURN;
    END IF;
    SELECT * INTO v_result FROM create_run(
        p_id, p_workflow, p_version, p_input, p_priority, p_idempotency_key,
        p_delay, p_run_at, p_deadline_in, p_deadline_at, p_retention_days, p_parent_id,
        p_parent_step, p_traceparent);
    created := v_result.created;
    run := v_result.run;
END
$$;
