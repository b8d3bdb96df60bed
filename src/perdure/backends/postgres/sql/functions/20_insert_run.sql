-- Creating runs (internal; the SQL producer start_run is in 90_producers.sql).

-- Insert a run (status pending) with its 'created' event and a wake notice, or find
-- the run that already holds its id or (workflow, idempotency key). No validation:
-- create_run() validates; apply_transition() and publish_event() pass trusted values.
-- p_version NULL: no process has registered the workflow yet; a claim fixes it.
-- p_lease_owner: a start handed to a worker of the starting process. The new run is
-- leased to it for p_lease seconds at once, as a claim would lease it ('claimed'
-- event, token, lease, started_at), and no wake notice goes out.
CREATE OR REPLACE FUNCTION insert_run(
    p_id text, p_workflow text, p_version integer, p_input jsonb, p_priority integer,
    p_idempotency_key text, p_available_at timestamptz, p_deadline_at timestamptz,
    p_retention_days integer, p_parent_id text, p_parent_step text,
    p_lease_owner text DEFAULT NULL, p_lease double precision DEFAULT NULL,
    OUT created boolean, OUT run runs
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    IF p_lease_owner IS NULL THEN
        INSERT INTO runs (id, workflow, version, status, input, priority, idempotency_key,
                          parent_id, parent_step, available_at, deadline_at, retention_days)
        VALUES (p_id, p_workflow, p_version, 'pending', p_input, p_priority, p_idempotency_key,
                p_parent_id, p_parent_step, p_available_at, p_deadline_at, p_retention_days)
        ON CONFLICT DO NOTHING
        RETURNING * INTO run;
    ELSE
        -- A claim's token (_new_lease in queries.sql): 64 random bits.
        INSERT INTO runs (id, workflow, version, status, input, priority, idempotency_key,
                          parent_id, parent_step, available_at, deadline_at, retention_days,
                          lease_owner, lease_token, lease_expires_at, started_at,
                          claims_since_progress)
        VALUES (p_id, p_workflow, p_version, 'running', p_input, p_priority,
                p_idempotency_key, p_parent_id, p_parent_step,
                perdure_now() + make_interval(secs => p_lease), p_deadline_at,
                p_retention_days, p_lease_owner,
                uuid_hash_extended(gen_random_uuid(), 0),
                perdure_now() + make_interval(secs => p_lease), perdure_now(), 1)
        ON CONFLICT DO NOTHING
        RETURNING * INTO run;
    END IF;
    IF FOUND THEN
        created := true;
        INSERT INTO events (run_id, type, data)
        VALUES (p_id, 'created', jsonb_strip_nulls(jsonb_build_object(
            'workflow', p_workflow, 'version', p_version, 'parent_id', p_parent_id)));
        IF p_lease_owner IS NULL THEN
            -- Also for a delayed run: workers re-read their next wake-up time. Not for
            -- a flow run whose start leases its tasks (quiet_start_wake, flows.sql).
            IF current_setting('perdure.claim_on_complete', true) IS DISTINCT FROM p_id THEN
                PERFORM send_notice('w', p_id);
            END IF;
        ELSE
            INSERT INTO events (run_id, type, data)
            VALUES (p_id, 'claimed', jsonb_build_object('worker', p_lease_owner));
        END IF;
        RETURN;
    END IF;
    created := false;
    -- A conflicting insert committed first: read the winner (a new snapshot sees it).
    SELECT * INTO run FROM runs WHERE id = p_id;
    IF NOT FOUND AND p_idempotency_key IS NOT NULL THEN
        SELECT * INTO run FROM runs
        WHERE workflow = p_workflow AND idempotency_key = p_idempotency_key;
    END IF;
    IF NOT FOUND THEN
        -- The winner is gone again (swept in between): let the caller retry.
        RAISE EXCEPTION 'run % vanished while it was being created', p_id
            USING ERRCODE = '40001';
    END IF;
END
$$;
