-- Ends of runs: a child's end reaching its parent, cancellation (internal; the
-- producer cancel_run is in 90_producers.sql).

-- A child run ended (p_status 'completed' or 'failed'): write the live parent's
-- journal row p_parent_step (kind 'child') and make the parent claimable now
-- unless it is running. Locks the parent (after the child: child-then-parent
-- order) before it writes, so a parent parking at the same time either sees the
-- row or is woken here. Returns true if the parent was woken.
CREATE OR REPLACE FUNCTION child_ended(
    p_parent_id text, p_parent_step text, p_child_id text, p_child_created timestamptz,
    p_status text, p_output json, p_error jsonb
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_parent runs;
BEGIN
    SELECT * INTO v_parent FROM runs WHERE id = p_parent_id FOR UPDATE;
    IF NOT FOUND OR v_parent.status NOT IN ('pending', 'waiting', 'running') THEN
        RETURN false;
    END IF;
    IF p_parent_step IS NOT NULL THEN
        DELETE FROM waits WHERE run_id = p_parent_id AND key = p_parent_step;  -- a timeout
        PERFORM write_step(p_parent_id, p_parent_step, 'child', p_status,
                           CASE WHEN p_status = 'completed' THEN p_output END,
                           CASE WHEN p_status = 'failed'
                                THEN coalesce(p_error, '{}') || jsonb_build_object('run_id', p_child_id)
                           END,
                           1, p_child_created, NULL);
    END IF;
    IF v_parent.status = 'running' THEN
        RETURN false;
    END IF;
    UPDATE runs SET available_at = now(), updated_at = now() WHERE id = p_parent_id;
    PERFORM send_notice('w', p_parent_id);
    RETURN true;
END
$$;

-- Cancel the live descendants of p_run_id (children, their children, ...): status
-- 'cancelled', lease cleared, waits and buffered signals deleted, a 'cancelled'
-- event (data {"by": p_run_id}), 'cancel' and 'done' notices. Called when a run is
-- cancelled or fails, in the same transaction: a child ends with its parent.
-- Returns the ids cancelled.
CREATE OR REPLACE FUNCTION cancel_descendants(p_run_id text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_ids text[];
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
            status = 'cancelled', completed_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL, wake_reason = NULL,
            available_at = 'infinity'
        WHERE id = ANY (v_ids) AND status IN ('pending', 'waiting', 'running')
        RETURNING id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_ids FROM ended;
    DELETE FROM waits WHERE run_id = ANY (v_ids);
    DELETE FROM signals WHERE run_id = ANY (v_ids);
    INSERT INTO events (run_id, type, data)
    SELECT c.id, 'cancelled', jsonb_build_object('by', p_run_id) FROM unnest(v_ids) AS c(id);
    PERFORM send_notice('c', c.id), send_notice('d', c.id) FROM unnest(v_ids) AS c(id);
    RETURN v_ids;
END
$$;

-- Cancel a live run and its live descendants (see cancel_descendants). A live
-- parent of the run gets a failed journal row (WorkflowCancelled) and becomes
-- claimable. Returns false if the run had ended; raises PD002 if there is no such run.
CREATE OR REPLACE FUNCTION cancel_tree(p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
BEGIN
    SELECT * INTO v_run FROM runs WHERE id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run with id %', quote_nullable(p_run_id)
            USING ERRCODE = 'PD002', DETAIL = coalesce(p_run_id, '');
    END IF;
    IF v_run.status NOT IN ('pending', 'waiting', 'running') THEN
        RETURN false;
    END IF;
    UPDATE runs SET
        status = 'cancelled', completed_at = now(), updated_at = now(),
        lease_owner = NULL, lease_expires_at = NULL, wake_reason = NULL,
        available_at = 'infinity'
    WHERE id = p_run_id;
    DELETE FROM waits WHERE run_id = p_run_id;
    DELETE FROM signals WHERE run_id = p_run_id;
    INSERT INTO events (run_id, type, data) VALUES (p_run_id, 'cancelled', NULL);
    PERFORM send_notice('c', p_run_id), send_notice('d', p_run_id);
    PERFORM cancel_descendants(p_run_id);
    IF v_run.parent_id IS NOT NULL THEN
        PERFORM child_ended(
            v_run.parent_id, v_run.parent_step, p_run_id, v_run.created_at, 'failed', NULL,
            jsonb_build_object('type', 'WorkflowCancelled',
                               'message', format('run %s was cancelled', p_run_id)));
    END IF;
    RETURN true;
END
$$;
