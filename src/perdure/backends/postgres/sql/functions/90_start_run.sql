-- The SQL producers: the public functions other services call (any language, psql,
-- triggers). Their parameter names are the user-facing names, so named notation
-- works (`perdure.start_run('wf', '{}', idempotency_key => 'k')`). Each applies every
-- limit the Python API does, then calls the internal function. They run with the
-- owner's rights (SECURITY DEFINER) and a pinned search_path: a role granted only
-- perdure_producer can start, signal, cancel and publish, and touch nothing else.
-- A producer's insert commits with the caller's own transaction.

-- Start a run of a workflow by name; returns the run id. A workflow some process has
-- registered gets its highest version and that version's defaults (priority,
-- retention, deadline); a name no process has registered yet is accepted too: the
-- run stays pending until a worker that serves it claims it (and fixes its version).
-- The same idempotency key (per workflow) or run id returns the existing run.
-- Example: SELECT perdure.start_run('onboard-user', '{"email": "a@b.c"}');
CREATE OR REPLACE FUNCTION start_run(
    workflow text, input jsonb DEFAULT 'null', idempotency_key text DEFAULT NULL,
    priority integer DEFAULT NULL, run_at timestamptz DEFAULT NULL, run_id text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    v_definition workflows;
    v_result record;
BEGIN
    PERFORM check_value('the input', start_run.input);
    PERFORM check_id('the run id', start_run.run_id);
    PERFORM check_id('the idempotency key', start_run.idempotency_key);
    PERFORM check_time('run_at', start_run.run_at);
    SELECT * INTO v_definition FROM workflows w WHERE w.name = start_run.workflow
    ORDER BY w.version DESC LIMIT 1;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM flows f WHERE f.name = start_run.workflow) THEN
        -- a DAG flow starts as one (at once: run_at is for workflows)
        IF start_run.run_at IS NOT NULL THEN
            RAISE EXCEPTION '% is a DAG flow, whose runs start at once: run_at is for workflows',
                quote_literal(start_run.workflow) USING ERRCODE = 'PD001';
        END IF;
        SELECT * INTO v_result FROM start_flow_run(
            coalesce(start_run.run_id, new_run_id()), start_run.workflow, NULL, start_run.input,
            coalesce(start_run.priority, 100), start_run.idempotency_key, 30);
        RETURN (v_result.run).id;
    END IF;
    IF v_definition.options ? 'limited' THEN
        -- A limited workflow: the run joins its '' lane (its key functions are Python's).
        SELECT * INTO v_result FROM create_keyed_run(
            coalesce(start_run.run_id, new_run_id()), start_run.workflow, v_definition.version,
            start_run.input,
            coalesce(start_run.priority, (v_definition.options->>'priority')::integer, 100),
            start_run.idempotency_key, 0, start_run.run_at,
            (v_definition.options->>'deadline_seconds')::double precision, NULL,
            coalesce((v_definition.options->>'retention_days')::integer, 30), NULL, NULL,
            '', NULL,
            CASE WHEN (v_definition.options -> 'limited' ->> 'rate')::boolean THEN '' END,
            NULL, NULL);
        RETURN (v_result.run).id;
    END IF;
    SELECT * INTO v_result FROM create_run(
        coalesce(start_run.run_id, new_run_id()), start_run.workflow, v_definition.version,
        start_run.input,
        coalesce(start_run.priority, (v_definition.options->>'priority')::integer, 100),
        start_run.idempotency_key, 0, start_run.run_at,
        (v_definition.options->>'deadline_seconds')::double precision, NULL,
        coalesce((v_definition.options->>'retention_days')::integer, 30));
    RETURN (v_result.run).id;
END
$$;
