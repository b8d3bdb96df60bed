-- Signals and published events (internal; the producers are in 90_producers.sql).

-- Deliver a signal to one run: 'resolved' (a matching wait, oldest first, got it),
-- 'buffered' (stored for the run's next matching wait) or 'ended' (run is over).
-- With an idempotency key the run already received, deliver nothing and answer
-- what that delivery answered. Raises PD002 if there is no such run.
CREATE OR REPLACE FUNCTION deliver_signal(
    p_run_id text, p_event text, p_payload jsonb, p_idempotency_key text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_key text;
    v_outcome text;
BEGIN
    PERFORM check_event(p_event, p_payload);
    -- The run's row lock serializes this with parking (which registers waits and
    -- consumes buffered signals under the same lock): no lost wake-up.
    v_run := lock_run(p_run_id);
    IF p_idempotency_key IS NOT NULL THEN
        SELECT outcome INTO v_outcome FROM signal_keys
        WHERE run_id = p_run_id AND key = p_idempotency_key;
        IF FOUND THEN
            RETURN v_outcome;
        END IF;
    END IF;
    IF v_run.status IN ('completed', 'failed', 'cancelled') THEN
        RETURN 'ended';
    END IF;
    SELECT key INTO v_key FROM waits
    WHERE run_id = p_run_id AND event = p_event AND (match IS NULL OR p_payload @> match)
    ORDER BY seq
    LIMIT 1;
    IF FOUND THEN
        PERFORM resolve_wait(v_run, v_key, p_event, p_payload);
        v_outcome := 'resolved';
    ELSE
        INSERT INTO signals (run_id, event, payload) VALUES (p_run_id, p_event, p_payload);
        v_outcome := 'buffered';
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        INSERT INTO signal_keys (run_id, key, outcome) VALUES (p_run_id, p_idempotency_key, v_outcome);
    END IF;
    RETURN v_outcome;
END
$$;
