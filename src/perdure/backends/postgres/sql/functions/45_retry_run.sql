-- Operations on ended runs (internal; App.retry and the REST API call them).

-- Resume a failed or cancelled run under the same id: its journal from p_from_step on
-- (NULL: from the step that failed, if one did) and every rollback row move to
-- superseded_steps (history, never replayed); the run is pending again with attempt
-- + 1, and a 'retried' event says by whom and from where. PD003 for a live run,
-- PD001 for a step the journal does not hold. A DAG-flow run goes to retry_flow().
-- A run parked because its replay diverged (wake_reason 'divergence') may be retried
-- too: its call order is cut where the journal is, its waits dropped (the replay
-- registers the ones it reaches again), and the current code reruns from there.
CREATE OR REPLACE FUNCTION retry_run(p_run_id text, p_from_step text, p_by text) RETURNS runs
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_from bigint;
    v_entry text;
    v_cut integer;
    v_keys text[];
BEGIN
    v_run := lock_run(p_run_id);
    IF v_run.status NOT IN ('failed', 'cancelled')
       AND NOT (v_run.status = 'waiting' AND v_run.wake_reason = 'divergence') THEN
        RAISE EXCEPTION 'run % is %: only a failed or cancelled run can be retried',
            p_run_id, v_run.status USING ERRCODE = 'PD003';
    END IF;
    IF v_run.kind = 'flow' THEN
        RETURN retry_flow(v_run, p_from_step, p_by);
    END IF;
    IF p_from_step IS NOT NULL THEN
        SELECT seq, kind || ':' || key INTO v_from, v_entry
        FROM steps WHERE run_id = p_run_id AND key = p_from_step;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run % has no step %', p_run_id, quote_literal(p_from_step)
                USING ERRCODE = 'PD001';
        END IF;
    ELSE
        SELECT seq, kind || ':' || key INTO v_from, v_entry
        FROM steps WHERE run_id = p_run_id AND status = 'failed' ORDER BY seq LIMIT 1;
    END IF;
    WITH gone AS (
        DELETE FROM steps
        WHERE run_id = p_run_id AND (seq >= v_from OR kind = 'rollback')
        RETURNING *
    ), kept AS (
        INSERT INTO superseded_steps (run_id, key, seq, kind, status, output, error, attempts,
                                      started_at, completed_at, recorded_at, attempt)
        SELECT run_id, key, seq, kind, status, output, error, attempts, started_at,
               completed_at, recorded_at, v_run.attempt
        FROM gone
        RETURNING key, seq
    )
    SELECT coalesce(array_agg(key ORDER BY seq), '{}') INTO v_keys FROM kept;
    v_cut := array_position(v_run.call_order, v_entry);
    DELETE FROM waits WHERE run_id = p_run_id;
    UPDATE runs SET
        call_order = ARRAY(
            SELECT o.e FROM unnest(v_run.call_order) WITH ORDINALITY AS o(e, n)
            WHERE (v_cut IS NULL OR o.n < v_cut) AND o.e NOT LIKE 'rollback:%'
            ORDER BY o.n),
        status = 'pending', attempt = attempt + 1, output = NULL, error = NULL,
        completed_at = NULL, available_at = perdure_now(), wake_reason = NULL,
        lease_owner = NULL, lease_expires_at = NULL, claims_since_progress = 0,
        updated_at = perdure_now()
    WHERE id = p_run_id
    RETURNING * INTO v_run;
    INSERT INTO events (run_id, type, data)
    VALUES (p_run_id, 'retried', jsonb_build_object(
        'from_step', p_from_step, 'superseded', to_jsonb(v_keys), 'by', p_by,
        'attempt', v_run.attempt));
    PERFORM send_notice('w', p_run_id);
    RETURN v_run;
END
$$;
