-- Creating runs (internal; the SQL producer start_run is in 90_producers.sql).

-- Start a run: validate the arguments and insert the run idempotently (see
-- insert_run). A start that finds the run its id or idempotency key names returns it
-- (created false); if its input differs, a 'duplicate_start' event records that. An
-- id that names a run of another workflow is PD001.
-- Times: p_run_at, else perdure_now() + p_delay seconds; p_deadline_at, else perdure_now() +
-- p_deadline_in seconds (NULL: no deadline). p_traceparent: the starter's W3C trace context.
-- p_lease_owner, p_lease: lease a run this call creates to that worker (insert_run).
CREATE OR REPLACE FUNCTION create_run(
    p_id text, p_workflow text, p_version integer, p_input jsonb,
    p_priority integer DEFAULT 100, p_idempotency_key text DEFAULT NULL,
    p_delay double precision DEFAULT 0, p_run_at timestamptz DEFAULT NULL,
    p_deadline_in double precision DEFAULT NULL, p_deadline_at timestamptz DEFAULT NULL,
    p_retention_days integer DEFAULT 30, p_parent_id text DEFAULT NULL,
    p_parent_step text DEFAULT NULL, p_traceparent text DEFAULT NULL,
    p_lease_owner text DEFAULT NULL, p_lease double precision DEFAULT NULL,
    OUT created boolean, OUT run runs
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_result record;
BEGIN
    -- Guards first.
    PERFORM check_start(p_id, p_idempotency_key, p_input, p_priority, p_retention_days);
    IF p_workflow IS NULL OR p_workflow !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid workflow name %: use 1-128 letters, digits, ''_'', ''.'' or ''-'', starting with a letter or digit',
            quote_nullable(left(p_workflow, 200)) USING ERRCODE = 'PD001';
    END IF;
    IF p_version < 1 THEN
        RAISE EXCEPTION 'invalid workflow version %: expected an integer >= 1',
            p_version USING ERRCODE = 'PD001';
    END IF;
    IF p_delay IS NOT NULL AND NOT (p_delay >= 0 AND p_delay < 'Infinity') THEN
        RAISE EXCEPTION 'invalid delay %: expected a finite number of seconds >= 0', p_delay
            USING ERRCODE = 'PD001';
    END IF;
    IF p_deadline_in IS NOT NULL AND NOT (p_deadline_in >= 0 AND p_deadline_in < 'Infinity') THEN
        RAISE EXCEPTION 'invalid deadline %: expected a finite number of seconds >= 0',
            p_deadline_in USING ERRCODE = 'PD001';
    END IF;
    IF p_run_at IS NOT NULL THEN
        PERFORM check_time('run_at', p_run_at);
    END IF;
    IF p_deadline_at IS NOT NULL THEN
        PERFORM check_time('deadline_at', p_deadline_at);
    END IF;
    PERFORM check_traceparent(p_traceparent);
    IF p_lease_owner IS NOT NULL AND NOT (p_lease > 0 AND p_lease < 'Infinity') THEN
        RAISE EXCEPTION 'invalid lease %: expected a finite number of seconds > 0',
            quote_nullable(p_lease) USING ERRCODE = 'PD001';
    END IF;
    IF (p_parent_id IS NULL) <> (p_parent_step IS NULL) THEN
        RAISE EXCEPTION 'parent_id and parent_step go together' USING ERRCODE = 'PD001';
    END IF;

    SELECT * INTO v_result FROM insert_run(
        p_id, p_workflow, p_version, p_input, p_priority, p_idempotency_key,
        coalesce(p_run_at, perdure_now() + make_interval(secs => coalesce(p_delay, 0))),
        coalesce(p_deadline_at, perdure_now() + make_interval(secs => p_deadline_in)),
        p_retention_days, p_parent_id, p_parent_step, p_lease_owner, p_lease);
    created := v_result.created;
    run := v_result.run;
    IF created THEN
        -- Only traced starts pay this update (insert_run is shared with children and
        -- published events, which carry no trace context).
        IF p_traceparent IS NOT NULL THEN
            UPDATE runs SET traceparent = p_traceparent WHERE id = p_id;
            run.traceparent := p_traceparent;
        END IF;
        RETURN;
    END IF;
    IF run.workflow <> p_workflow THEN
        RAISE EXCEPTION 'run id % already names a run of workflow %', quote_literal(p_id),
            quote_literal(run.workflow) USING ERRCODE = 'PD001';
    END IF;
    IF run.input <> p_input THEN
        INSERT INTO events (run_id, type, data)
        VALUES (run.id, 'duplicate_start', jsonb_strip_nulls(jsonb_build_object(
            'idempotency_key', p_idempotency_key, 'input_differs', true)));
    END IF;
END
$$;
