-- Transitions of claimed runs (internal): the common shape, many in one call.

-- Apply fenced transitions that have no waits and no children (apply_transition() takes
-- the others), in the order given: p_batch is a JSON list of their parameters (steps
-- and events as JSON text of a list of objects, output and error as JSON text). Each
-- is the statement apply_transition of queries.sql, included below with its
-- parameters read from the batch's row t. One row per transition applied: its place
-- in p_batch (1, 2, ...) and the journal keys it wrote (keys holding a final row
-- already are left out); none for a lost lease.
-- A loop of statements on one run each, not one statement over the batch: each reads
-- its run by key whatever the statistics, and a write a transition makes to another
-- run (a child's end) comes after that run's own transitions before it.
-- A transition with "quiet" completes a flow task whose worker claims on complete
-- (claim_on_complete in flows.sql, sent after this call in the same transaction): as
-- quiet_flow_wake does, the tasks its flow run starts send no wake notice.
CREATE OR REPLACE FUNCTION apply_transitions(p_batch json)
-- (The columns after the first two: what the statement's calls returned.)
RETURNS TABLE (applied_place integer, applied_keys text[], applied_ended boolean,
               applied_woken boolean, applied_told boolean, applied_cancelled text[])
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    t record;
    v_quieted boolean := false;
BEGIN
    FOR t IN
        SELECT * FROM ROWS FROM (json_to_recordset(p_batch) AS (
            run_id text, token bigint, outcome text, reason text, wake_at timestamptz,
            output text, error text, step_attempts integer, reopen text[], steps text,
            events text, quiet boolean, asked text[]
        )) WITH ORDINALITY AS b(run_id, token, outcome, reason, wake_at, output, error,
                                step_attempts, reopen, steps, events, quiet, asked, ord)
    LOOP
        IF t.quiet OR v_quieted THEN
            PERFORM set_config('perdure.claim_on_complete', CASE WHEN t.quiet THEN coalesce(
                (SELECT r.parent_id FROM runs r WHERE r.id = t.run_id), '') ELSE '' END, true);
            v_quieted := t.quiet;
        END IF;
        RETURN QUERY {{query apply_transition}};
    END LOOP;
END
$$;
