-- DAG flows from SQL, any language (DESIGN §6): a task worker's three calls.

-- Report that task (run_id, step, task_index) failed with `error` (a message) under
-- `lease_token`: retried after base_delay * 2^attempt seconds while attempts remain,
-- else the run fails (its other live tasks are cancelled). True when it took effect;
-- false, with a notice, for a stale lease token: nothing changes.
-- Example: SELECT perdure.fail_task(run_id, step, task_index, 'timeout fetching the page', lease_token);
CREATE OR REPLACE FUNCTION fail_task(
    run_id text, step text, task_index integer, error text, lease_token bigint
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    v_id text := run_id || ':' || step || ':' || task_index;
    v_task runs;
    v_max integer;
    v_delay double precision;
    v_error jsonb;
    v_ok boolean;
    v_wake timestamptz;
BEGIN
    IF error IS NULL OR octet_length(error) > 1048576 THEN
        RAISE EXCEPTION 'error must be a text of at most 1 MiB' USING ERRCODE = 'PD001';
    END IF;
    -- By its key alone, the conditions after (see claim_on_complete in flows.sql).
    SELECT * INTO v_task FROM (SELECT * FROM runs WHERE id = v_id OFFSET 0) r
    WHERE r.lease_token = fail_task.lease_token AND r.status = 'running' AND r.kind = 'task';
    IF FOUND THEN
        SELECT coalesce(fs.max_attempts, f.max_attempts), coalesce(fs.base_delay, f.base_delay)
        INTO v_max, v_delay
        FROM flow_steps fs
        JOIN flows f ON f.name = fs.flow AND f.version = fs.version
        WHERE fs.flow = split_part(v_task.workflow, ':', 1) AND fs.version = v_task.version
          AND fs.step = v_task.parent_step;
        v_error := jsonb_build_object('type', 'TaskError', 'message', error,
                                      'attempt', v_task.attempt);
        IF v_task.attempt < v_max THEN
            v_wake := perdure_now()
                      + make_interval(secs => least(86400, v_delay * 2 ^ least(v_task.attempt, 30)));
            SELECT t.ok INTO v_ok FROM apply_transition(
                v_id, lease_token, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                ARRAY['retrying'],
                ARRAY[jsonb_build_object('wake_at', v_wake, 'error',
                      jsonb_build_object('type', 'TaskError', 'message', error))::text],
                1, 'retry', NULL, v_wake, NULL, v_error::text, '{}', '{}', '{}', '{}', NULL) AS t;
        ELSE
            SELECT t.ok INTO v_ok FROM apply_transition(
                v_id, lease_token, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                ARRAY['failed'],
                ARRAY[jsonb_build_object('type', 'TaskError', 'message', error)::text],
                1, 'fail', NULL, NULL, NULL, v_error::text, '{}', '{}', '{}', '{}', NULL) AS t;
        END IF;
    END IF;
    IF NOT coalesce(v_ok, false) THEN
        RAISE NOTICE 'perdure: task %/%/% is not held under this lease token: nothing changed',
            run_id, step, task_index;
    END IF;
    RETURN coalesce(v_ok, false);
END
$$;
