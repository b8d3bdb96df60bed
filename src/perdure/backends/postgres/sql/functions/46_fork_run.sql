-- Operations on runs (internal; App.fork and the REST API call it).

-- A new run (p_id) of the source's workflow whose journal is a copy of the source's
-- rows before p_before_step (NULL: all of them, but rows still retrying); the source
-- is untouched. The new run's 'created' event says where it came from. PD001 for a
-- step the source's journal does not hold.
CREATE OR REPLACE FUNCTION fork_run(
    p_source_id text, p_id text, p_before_step text, p_input jsonb, p_version integer,
    p_by text
) RETURNS runs
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_source runs;
    v_before bigint;
    v_run runs;
BEGIN
    SELECT * INTO v_source FROM runs WHERE id = p_source_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run with id %', quote_literal(p_source_id)
            USING ERRCODE = 'PD002', DETAIL = p_source_id;
    END IF;
    IF p_before_step IS NOT NULL THEN
        SELECT seq INTO v_before FROM steps WHERE run_id = p_source_id AND key = p_before_step;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run % has no step %', p_source_id, quote_literal(p_before_step)
                USING ERRCODE = 'PD001';
        END IF;
    END IF;
    INSERT INTO runs (id, workflow, version, status, input, priority, available_at,
                      deadline_at, retention_days, concurrency_key, fifo_key, rate_key)
    VALUES (p_id, v_source.workflow, coalesce(p_version, v_source.version), 'pending',
            coalesce(p_input, v_source.input), v_source.priority, perdure_now(), NULL,
            v_source.retention_days, v_source.concurrency_key, v_source.fifo_key,
            v_source.rate_key)
    RETURNING * INTO v_run;
    INSERT INTO steps (run_id, key, kind, status, output, error, attempts, started_at,
                       completed_at, recorded_at)
    SELECT p_id, key, kind, status, output, error, attempts, started_at, completed_at,
           perdure_now()
    FROM steps
    WHERE run_id = p_source_id AND status <> 'retrying' AND kind <> 'rollback'
      AND (v_before IS NULL OR seq < v_before)
    ORDER BY seq;
    INSERT INTO events (run_id, type, data)
    VALUES (p_id, 'created', jsonb_strip_nulls(jsonb_build_object(
        'workflow', v_run.workflow, 'version', v_run.version, 'forked_from', p_source_id,
        'from_step', p_before_step, 'by', p_by)));
    PERFORM send_notice('w', p_id);
    RETURN v_run;
END
$$;
