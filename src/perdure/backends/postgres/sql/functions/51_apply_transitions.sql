-- Transitions of claimed runs (internal): the common shape, many in one call.

-- Apply fenced transitions that have no waits and no children (apply_transition() takes
-- the others), in the order given: p_batch is a JSON list of their parameters (steps
-- and events as JSON text of a list of objects, output and error as JSON text). Each
-- is one data-modifying statement: the fenced UPDATE applies the outcome and every
-- other write selects FROM it, so a transition whose fence failed writes nothing. One
-- row per transition applied: its place in p_batch (1, 2, ...) and the journal keys
-- it wrote (keys holding a final row already are left out); none for a lost lease.
-- A loop of statements on one run each, not one statement over the batch: each reads
-- its run by key whatever the statistics, and a write a transition makes to another
-- run (a child's end) comes after that run's own transitions before it.
-- A transition with "quiet" completes a flow task whose worker claims on complete
-- (claim_on_complete in flows.sql, sent after this call in the same transaction): as
-- quiet_flow_wake does, the tasks its flow run starts send no wake notice.
CREATE OR REPLACE FUNCTION apply_transitions(p_batch json)
RETURNS TABLE (applied_place integer, applied_keys text[])
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    t record;
    v_quieted boolean := false;
BEGIN
    FOR t IN
        SELECT * FROM ROWS FROM (json_to_recordset(p_batch) AS (
            run_id text, token bigint, outcome text, reason text, wake_at timestamptz,
            output text, error text, step_attempts integer, reopen text[], steps text,
            events text, quiet boolean
        )) WITH ORDINALITY AS b(run_id, token, outcome, reason, wake_at, output, error,
                                step_attempts, reopen, steps, events, quiet, ord)
    LOOP
        IF t.quiet OR v_quieted THEN
            PERFORM set_config('perdure.claim_on_complete', CASE WHEN t.quiet THEN coalesce(
                (SELECT r.parent_id FROM runs r WHERE r.id = t.run_id), '') ELSE '' END, true);
            v_quieted := t.quiet;
        END IF;
        RETURN QUERY
        WITH u AS (  -- the journal rows
                    SELECT * FROM ROWS FROM (json_to_recordset(t.steps::json) AS (
                        key text, kind text, status text, output text, error text, attempts integer,
                        started_at timestamptz, completed_at timestamptz
                    )) WITH ORDINALITY AS u(key, kind, status, output, error, attempts, started_at,
                                            completed_at, ord)
                ),
        fence AS (
            UPDATE runs AS r SET
                status = CASE t.outcome
                    WHEN 'none' THEN 'running'
                    WHEN 'complete' THEN 'completed'
                    WHEN 'fail' THEN 'failed'
                    ELSE 'waiting' END,
                lease_owner = CASE WHEN t.outcome = 'none' THEN r.lease_owner END,
                lease_expires_at = CASE WHEN t.outcome = 'none' THEN r.lease_expires_at END,
                available_at = CASE t.outcome
                    WHEN 'none' THEN r.available_at
                    WHEN 'park' THEN coalesce(
                        least(t.wake_at, r.deadline_at,
                              (SELECT min(w.timeout_at) FROM waits w
                               WHERE w.run_id = r.id AND w.key NOT IN (SELECT u.key FROM u))),
                        'infinity')
                    WHEN 'retry' THEN coalesce(least(t.wake_at, r.deadline_at), perdure_now())
                    WHEN 'release' THEN perdure_now()
                    ELSE 'infinity' END,
                wake_reason = CASE t.outcome
                    WHEN 'none' THEN r.wake_reason
                    WHEN 'park' THEN t.reason
                    WHEN 'retry' THEN 'retry' END,
                attempt = r.attempt + CASE WHEN t.outcome = 'retry' THEN 1 ELSE 0 END,
                output = CASE WHEN t.outcome = 'complete' THEN t.output::json ELSE r.output END,
                error = CASE t.outcome
                    WHEN 'complete' THEN NULL
                    WHEN 'fail' THEN t.error::jsonb
                    WHEN 'retry' THEN t.error::jsonb
                    ELSE r.error END,
                completed_at = CASE WHEN t.outcome IN ('complete', 'fail') THEN perdure_now() END,
                step_attempts = r.step_attempts + t.step_attempts,
                claims_since_progress = 0,
                updated_at = perdure_now()
            WHERE r.id = t.run_id AND r.lease_token = t.token AND r.status = 'running'
            RETURNING r.id, r.parent_id, r.parent_step, r.created_at, r.available_at, r.attempt
        ),
        written AS (
            -- The statement of write_steps(), inline on purpose: calling the function from
            -- here cost W1 about 8% at the README setup (bench/RESULTS.md, 2026-11-25).
            INSERT INTO steps AS s (run_id, key, kind, status, output, error, attempts,
                                    started_at, completed_at, recorded_at)
            SELECT f.id, u.key, u.kind, u.status, u.output::json, u.error::jsonb, u.attempts,
                   u.started_at, coalesce(u.completed_at, perdure_now()), perdure_now()
            FROM fence f
            CROSS JOIN u
            ORDER BY u.ord
            ON CONFLICT (run_id, key) DO UPDATE SET
                seq = excluded.seq, kind = excluded.kind, status = excluded.status,
                output = excluded.output, error = excluded.error, attempts = excluded.attempts,
                started_at = excluded.started_at, completed_at = excluded.completed_at,
                recorded_at = excluded.recorded_at
            WHERE s.status = 'retrying'
            RETURNING s.key
        ),
        unwaited AS (
            DELETE FROM waits w
            USING fence f
            WHERE w.run_id = f.id
              AND (w.key IN (SELECT u.key FROM u) OR t.outcome IN ('complete', 'fail'))
        ),
        unbuffered AS (
            DELETE FROM signals g
            USING fence f
            WHERE g.run_id = f.id AND t.outcome IN ('complete', 'fail')
        ),
        reopened AS (
            -- A workflow retry: the failed steps that ended the attempt run again, fresh budget.
            UPDATE steps s SET status = 'retrying', attempts = 0
            FROM fence f
            WHERE s.run_id = f.id AND s.key = ANY (t.reopen) AND s.status = 'failed'
        ),
        logged AS (
            INSERT INTO events (run_id, type, data)
            SELECT f.id, e.type, e.data::jsonb
            FROM fence f
            CROSS JOIN ROWS FROM (json_to_recordset(t.events::json) AS (type text, data text))
                WITH ORDINALITY AS e(type, data, ord)
            ORDER BY e.ord
        ),
        applied AS MATERIALIZED (  -- each column computed: every call runs
            SELECT (SELECT coalesce(array_agg(w.key), '{}') FROM written w) AS keys,
                   CASE WHEN t.outcome = 'complete'
                        THEN send_end(f.id, 'completed', f.attempt, t.output)
                        WHEN t.outcome = 'fail' THEN send_end(f.id, 'failed', f.attempt, t.error)
                        WHEN EXISTS (SELECT 1 FROM watchers w  -- watched(), inline: the hot path
                                     WHERE w.run_id = f.id AND w.until > perdure_now())
                        THEN send_notice('p', f.id) END AS ended,
                   CASE WHEN t.outcome IN ('park', 'retry', 'release') AND f.available_at <= perdure_now()
                        THEN send_notice('w', f.id) END AS woken,
                   -- A child's end: the parent's journal row and wake-up, under the parent's lock.
                   CASE WHEN t.outcome IN ('complete', 'fail') AND f.parent_id IS NOT NULL
                        THEN child_ended(
                            f.parent_id, f.parent_step, f.id, f.created_at,
                            CASE WHEN t.outcome = 'complete' THEN 'completed' ELSE 'failed' END,
                            t.output::json, t.error::jsonb) END AS parent,
                   -- A failed run's live children end with it.
                   CASE WHEN t.outcome = 'fail' THEN cancel_descendants(f.id) END AS cancelled
            FROM fence f
        )
        SELECT t.ord::integer, a.keys FROM applied a;
    END LOOP;
END
$$;
