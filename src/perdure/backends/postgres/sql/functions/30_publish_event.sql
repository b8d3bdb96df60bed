-- Signals and published events (internal; the producers are in 90_producers.sql).

-- Publish an event: resolve every matching wait (one per run, as deliver_signal does)
-- and start one run of every workflow subscribed to a matching pattern (highest
-- registered version, input = payload). Nothing is buffered. With an idempotency
-- key already used, return the first call's result and do nothing.
-- Returns {"started": [run ids], "resumed": [run ids]}.
CREATE OR REPLACE FUNCTION publish_event(p_event text, p_payload jsonb, p_idempotency_key text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_result jsonb;
    v_started text[] := '{}';
    v_resumed text[] := '{}';
    v_target record;
    v_run runs;
    v_key text;
    v_new record;
BEGIN
    PERFORM check_event(p_event, p_payload);
    IF p_idempotency_key IS NOT NULL THEN
        -- A concurrent first call holds the key until it commits; then we read its result.
        INSERT INTO published (key, result) VALUES (p_idempotency_key, '{}')
        ON CONFLICT (key) DO NOTHING;
        IF NOT FOUND THEN
            SELECT result INTO v_result FROM published WHERE key = p_idempotency_key;
            RETURN v_result;
        END IF;
    END IF;

    -- Waiting runs, locked one by one in id order (a stable lock order).
    FOR v_target IN
        SELECT DISTINCT w.run_id FROM waits w
        WHERE w.event = p_event AND (w.match IS NULL OR p_payload @> w.match)
        ORDER BY w.run_id
    LOOP
        SELECT * INTO v_run FROM runs WHERE id = v_target.run_id FOR UPDATE;
        CONTINUE WHEN NOT FOUND OR v_run.status NOT IN ('pending', 'waiting', 'running');
        SELECT key INTO v_key FROM waits
        WHERE run_id = v_run.id AND event = p_event AND (match IS NULL OR p_payload @> match)
        ORDER BY seq
        LIMIT 1;
        CONTINUE WHEN NOT FOUND;
        PERFORM resolve_wait(v_run, v_key, p_event, p_payload);
        v_resumed := v_resumed || v_run.id;
    END LOOP;

    -- Subscribed workflows: one new run each, at the highest registered version.
    FOR v_target IN
        SELECT DISTINCT ON (s.workflow) s.workflow, w.version, w.options
        FROM subscriptions s
        JOIN workflows w ON w.name = s.workflow
        WHERE p_event LIKE like_pattern(s.pattern) ESCAPE '\'
        ORDER BY s.workflow, w.version DESC
    LOOP
        SELECT * INTO v_new FROM insert_run(
            new_run_id(), v_target.workflow, v_target.version, p_payload,
            coalesce((v_target.options ->> 'priority')::integer, 100), NULL, perdure_now(),
            perdure_now() + make_interval(secs => (v_target.options ->> 'deadline_seconds')::double precision),
            coalesce((v_target.options ->> 'retention_days')::integer, 30), NULL, NULL);
        IF v_new.created AND v_target.options ? 'limited' THEN
            -- A limited workflow's run started without its code: the workflow's '' lane.
            UPDATE runs SET concurrency_key = '',
                            rate_key = CASE WHEN (v_target.options -> 'limited' ->> 'rate')::boolean
                                            THEN '' END
            WHERE id = (v_new.run).id;
        END IF;
        v_started := v_started || (v_new.run).id;
    END LOOP;

    v_result := jsonb_build_object('started', to_jsonb(v_started), 'resumed', to_jsonb(v_resumed));
    IF p_idempotency_key IS NOT NULL THEN
        UPDATE published SET result = v_result WHERE key = p_idempotency_key;
    END IF;
    RETURN v_result;
END
$$;
