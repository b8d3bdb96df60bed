-- Transitions of claimed runs (internal).

-- Apply one fenced transition of a claimed run (the general path: the backend
-- sends transitions without waits or children as one data-modifying statement
-- instead, with the same meaning). Arrays are parallel: one element per journal
-- row / event / wait. p_outcome is 'none', 'park', 'complete', 'fail', 'retry' or
-- 'release'. p_children is a JSON array of new runs. Returns ok = false (and
-- writes nothing) if the run is not running under p_token; else the journal keys
-- written (keys holding a final row already are left out). p_asked: the steps the
-- body first asked for in this pass, appended to the run's call order; p_error on a
-- park is stored as the run's error (a diverged run's).
CREATE OR REPLACE FUNCTION apply_transition(
    p_run_id text, p_token bigint,
    p_keys text[], p_kinds text[], p_statuses text[], p_outputs text[], p_errors text[],
    p_attempts integer[], p_started timestamptz[], p_completed timestamptz[],
    p_event_types text[], p_event_data text[], p_step_attempts integer,
    p_outcome text, p_reason text, p_wake_at timestamptz, p_output text, p_error text,
    p_wait_keys text[], p_wait_events text[], p_wait_matches text[],
    p_wait_timeouts timestamptz[], p_children jsonb, p_asked text[] DEFAULT '{}',
    OUT ok boolean, OUT written text[]
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_child jsonb;
    v_created boolean;
    v_child_id text;
    v_child_status text;
    v_child_output json;
    v_child_created timestamptz;
    v_wait record;
    v_signal record;
    v_due boolean := false;
    v_at timestamptz;
BEGIN
    SELECT * INTO v_run FROM runs
    WHERE id = p_run_id AND lease_token = p_token AND status = 'running'
    FOR UPDATE;
    IF NOT FOUND THEN
        ok := false;
        RETURN;
    END IF;
    ok := true;

    written := write_steps(p_run_id, p_keys, p_kinds, p_statuses, p_outputs, p_errors,
                           p_attempts, p_started, p_completed);
    DELETE FROM waits WHERE run_id = p_run_id AND key = ANY (p_keys);

    INSERT INTO events (run_id, type, data)
    SELECT p_run_id, e.type, e.data::jsonb
    FROM unnest(p_event_types, p_event_data) WITH ORDINALITY AS e(type, data, ord)
    ORDER BY e.ord;

    FOR v_child IN SELECT value FROM jsonb_array_elements(coalesce(p_children, '[]')) LOOP
        SELECT i.created, (i.run).id, (i.run).status, (i.run).output, (i.run).created_at
        INTO v_created, v_child_id, v_child_status, v_child_output, v_child_created
        FROM insert_run(
            v_child ->> 'id', v_child ->> 'workflow', (v_child ->> 'version')::integer,
            (v_child ->> 'input_json')::jsonb, (v_child ->> 'priority')::integer,
            v_child ->> 'idempotency_key',
            coalesce((v_child ->> 'run_at')::timestamptz,
                     perdure_now() + make_interval(secs => coalesce((v_child ->> 'delay')::double precision, 0))),
            coalesce((v_child ->> 'deadline_at')::timestamptz,
                     perdure_now() + make_interval(secs => (v_child ->> 'deadline_in')::double precision)),
            (v_child ->> 'retention_days')::integer, p_run_id, v_child ->> 'parent_step') AS i;
        IF v_created AND v_child ->> 'traceparent' IS NOT NULL THEN
            -- The trace context of the parent's pass: the child's spans join its trace.
            UPDATE runs SET traceparent = v_child ->> 'traceparent' WHERE id = v_child_id;
        END IF;
        IF v_created AND v_child ? 'concurrency_key' THEN  -- a limited workflow's keys
            UPDATE runs SET concurrency_key = v_child ->> 'concurrency_key',
                            fifo_key = v_child ->> 'fifo_key', rate_key = v_child ->> 'rate_key'
            WHERE id = v_child_id;
        END IF;
        -- The child exists already (the parent was retried): a completed one gives its
        -- output at once; a failed or cancelled one is retried (its end reaches the
        -- parent as any child's does).
        IF NOT v_created AND v_child_status = 'completed' THEN
            PERFORM write_step(p_run_id, v_child ->> 'parent_step', 'child', 'completed',
                               v_child_output, NULL, 1, v_child_created, NULL);
        ELSIF NOT v_created AND v_child_status IN ('failed', 'cancelled') THEN
            PERFORM retry_run(v_child_id, NULL, 'the retry of its parent ' || p_run_id);
        END IF;
    END LOOP;

    IF p_outcome = 'park' THEN
        INSERT INTO waits (run_id, key, event, match, timeout_at)
        SELECT p_run_id, w.key, w.event, w.match::jsonb, w.timeout_at
        FROM unnest(p_wait_keys, p_wait_events, p_wait_matches, p_wait_timeouts) WITH ORDINALITY
             AS w(key, event, match, timeout_at, ord)
        ORDER BY w.ord
        ON CONFLICT (run_id, key) DO NOTHING;
        -- A wait whose key has a journal row already is satisfied: drop it, wake now.
        DELETE FROM waits w USING steps s
        WHERE w.run_id = p_run_id AND s.run_id = p_run_id AND s.key = w.key
          AND s.status <> 'retrying';
        IF FOUND THEN
            v_due := true;
        END IF;
        -- A buffered signal matching a wait is consumed (oldest first).
        FOR v_wait IN SELECT * FROM waits WHERE run_id = p_run_id ORDER BY seq LOOP
            -- (a sibling of a wait for several events may have taken a signal first)
            CONTINUE WHEN NOT EXISTS (
                SELECT 1 FROM waits WHERE run_id = p_run_id AND key = v_wait.key);
            SELECT id, payload INTO v_signal FROM signals
            WHERE run_id = p_run_id AND event = v_wait.event
              AND (v_wait.match IS NULL OR payload @> v_wait.match)
            ORDER BY id
            LIMIT 1;
            CONTINUE WHEN NOT FOUND;
            DELETE FROM signals WHERE id = v_signal.id;
            DELETE FROM waits WHERE run_id = p_run_id AND key = v_wait.key;
            PERFORM write_step(p_run_id, v_wait.key, 'wait', 'completed',
                               v_signal.payload::text::json, NULL, 1, v_wait.created_at, NULL);
            INSERT INTO events (run_id, type, data)
            VALUES (p_run_id, 'signaled', jsonb_build_object(
                'step', v_wait.key, 'event', v_wait.event, 'buffered', true));
            PERFORM drop_sibling_waits(p_run_id, v_wait.key);
            v_due := true;
        END LOOP;
        -- A child that ended already has written its journal row.
        IF EXISTS (
            SELECT 1 FROM jsonb_array_elements(coalesce(p_children, '[]')) AS c(value)
            JOIN steps s ON s.run_id = p_run_id AND s.key = c.value ->> 'parent_step'
            WHERE s.status <> 'retrying'
        ) THEN
            v_due := true;
        END IF;
        IF v_due THEN
            v_at := perdure_now();
        ELSE
            v_at := coalesce(least(p_wake_at, v_run.deadline_at,
                                   (SELECT min(timeout_at) FROM waits WHERE run_id = p_run_id)),
                             'infinity');
        END IF;
        UPDATE runs SET
            status = 'waiting', lease_owner = NULL, lease_expires_at = NULL,
            wake_reason = p_reason, available_at = v_at,
            error = coalesce(p_error::jsonb, error)
        WHERE id = p_run_id;
        IF v_at <= perdure_now() THEN
            PERFORM send_notice('w', p_run_id);
        END IF;
    ELSIF p_outcome IN ('complete', 'fail') THEN
        UPDATE runs SET
            status = CASE WHEN p_outcome = 'complete' THEN 'completed' ELSE 'failed' END,
            output = CASE WHEN p_outcome = 'complete' THEN p_output::json ELSE output END,
            error = CASE WHEN p_outcome = 'complete' THEN NULL ELSE p_error::jsonb END,
            completed_at = perdure_now(), lease_owner = NULL, lease_expires_at = NULL,
            wake_reason = NULL, available_at = 'infinity'
        WHERE id = p_run_id;
        DELETE FROM waits WHERE run_id = p_run_id;
        DELETE FROM signals WHERE run_id = p_run_id;
        PERFORM send_end(p_run_id, CASE WHEN p_outcome = 'complete' THEN 'completed' ELSE 'failed' END,
                         v_run.attempt, CASE WHEN p_outcome = 'complete' THEN p_output ELSE p_error END);
        IF p_outcome = 'fail' THEN
            PERFORM cancel_descendants(p_run_id);  -- a failed run's live children end with it
        END IF;
        IF v_run.parent_id IS NOT NULL THEN
            PERFORM child_ended(
                v_run.parent_id, v_run.parent_step, p_run_id, v_run.created_at,
                CASE WHEN p_outcome = 'complete' THEN 'completed' ELSE 'failed' END,
                p_output::json, p_error::jsonb);
        END IF;
    ELSIF p_outcome = 'retry' THEN
        v_at := coalesce(least(p_wake_at, v_run.deadline_at), perdure_now());
        UPDATE runs SET
            status = 'waiting', wake_reason = 'retry', attempt = attempt + 1,
            error = p_error::jsonb, available_at = v_at,
            lease_owner = NULL, lease_expires_at = NULL
        WHERE id = p_run_id;
        IF v_at <= perdure_now() THEN
            PERFORM send_notice('w', p_run_id);
        END IF;
    ELSIF p_outcome = 'release' THEN
        UPDATE runs SET
            status = 'waiting', wake_reason = NULL, available_at = perdure_now(),
            lease_owner = NULL, lease_expires_at = NULL
        WHERE id = p_run_id;
        PERFORM send_notice('w', p_run_id);
    ELSIF p_outcome <> 'none' THEN
        RAISE EXCEPTION 'unknown outcome %', quote_nullable(p_outcome) USING ERRCODE = 'PD001';
    END IF;

    IF p_outcome NOT IN ('complete', 'fail') AND watched(p_run_id) THEN
        PERFORM send_notice('p', p_run_id);  -- its watchers see the history grow
    END IF;
    UPDATE runs SET
        step_attempts = step_attempts + coalesce(p_step_attempts, 0),
        claims_since_progress = 0,
        updated_at = perdure_now(),
        call_order = call_order || coalesce(p_asked, '{}')
    WHERE id = p_run_id;
END
$$;
