-- Ends of runs: a child's end reaching its parent, cancellation (internal; the
-- producer cancel_run is in 90_producers.sql).

-- Cancel the live descendants of p_run_id (children, their children, ...): status
-- 'cancelled', lease cleared, waits and buffered signals deleted, a 'cancelled'
-- event (data {"by": p_run_id}), 'cancel' and end notices. Called when a run is
-- cancelled or fails, in the same transaction: a child ends with its parent.
-- Returns the ids cancelled.
CREATE OR REPLACE FUNCTION cancel_descendants(p_run_id text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_ids text[];
    v_attempts integer[];
BEGIN
    WITH RECURSIVE tree (id) AS (
        SELECT r.id FROM runs r
        WHERE r.parent_id = p_run_id AND r.status IN ('pending', 'waiting', 'running')
        UNION
        SELECT r.id FROM runs r JOIN tree t ON r.parent_id = t.id
        WHERE r.status IN ('pending', 'waiting', 'running')
    )
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM tree;
    IF v_ids IS NULL THEN
        RETURN '{}';
    END IF;
    -- Lock the descendants in id order, then keep those still live.
    PERFORM 1 FROM runs WHERE id = ANY (v_ids) ORDER BY id FOR UPDATE;
    WITH ended AS (
        UPDATE runs SET
            status = 'cancelled', completed_at = perdure_now(), updated_at = perdure_now(),
            lease_owner = NULL, lease_expires_at = NULL, wake_reason = NULL,
            available_at = 'infinity'
        WHERE id = ANY (v_ids) AND status IN ('pending', 'waiting', 'running')
        RETURNING id, attempt
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}'), coalesce(array_agg(attempt ORDER BY id), '{}')
    INTO v_ids, v_attempts FROM ended;
    DELETE FROM waits WHERE run_id = ANY (v_ids);
    DELETE FROM signals WHERE run_id = ANY (v_ids);
    INSERT INTO events (run_id, type, data)
    SELECT c.id, 'cancelled', jsonb_build_object('by', p_run_id) FROM unnest(v_ids) AS c(id);
    PERFORM send_notice('c', c.id), send_end(c.id, 'cancelled', c.attempt, NULL)
    FROM unnest(v_ids, v_attempts) AS c(id, attempt);
    RETURN v_ids;
END
$$;
