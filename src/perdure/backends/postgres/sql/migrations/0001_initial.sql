-- perdure schema, version 1.
--
-- Everything about a run lives in these tables and nowhere else. The migration
-- runner (PostgresBackend.migrate) takes pg_advisory_xact_lock, creates the schema
-- if needed and runs `SET LOCAL search_path` to it before this file, so every
-- object below is created unqualified inside the target schema, and every
-- function captures that schema with `SET search_path FROM CURRENT`: the
-- functions work when called schema-qualified from a session with any other
-- search_path (SQL producers: other services, psql, triggers).
--
-- Lifecycle of a run
-- ------------------
--
--   create_run()             claim (worker)              apply: Complete | Fail
--   ───────────► pending ─────────────────► running ───────────────────────────► completed | failed
--                                            │  ▲ │
--                        apply: Park/Retry/  │  │ │ lease expires (worker died):
--                               Release      ▼  │ │ claimable again, same row
--                                          waiting ┘
--   cancel_run() from any live status ────────────────────────────────────────► cancelled
--
-- * One claim path. A run is claimable when its status is pending, waiting or
--   running and available_at <= now(). For a running run available_at is the
--   lease expiry, so the runs of a dead worker come back through the same
--   partial index (runs_claim_idx). A run that only an event can wake has
--   available_at = 'infinity'.
-- * Fencing. Every claim bumps lease_token; every write made for a claimed run
--   checks (id, lease_token, status = 'running') in the statement that writes,
--   so a zombie worker or the holder of a cancelled run writes nothing.
-- * The journal (steps) holds one row per step key. Completed and failed rows are
--   final; a retrying row is replaced by the next write of its key. Replay reads
--   the journal in seq order; `output` is `json`, which keeps the exact text the
--   engine wrote.
-- * Waits are registered `wait_for_event`s not yet resolved; signals are events
--   delivered to a live run that did not wait for them yet (buffered, oldest
--   first). Resolving a wait writes a completed journal row (kind 'wait') and
--   makes the run claimable now.
-- * A child run carries parent_id / parent_step; when it ends, the parent's
--   journal row parent_step is written (completed with the child's output, or
--   failed with its error) and the parent becomes claimable now.
-- * Notices: pg_notify on channel '<schema>.wake' (payload 'w:<run id>' when work
--   may be claimable, 'c:<run id>' when a run was cancelled) and '<schema>.done'
--   ('d:<run id>' when a run ended). They are sent inside the writing
--   transaction, so Postgres delivers them at commit. They carry ids only and
--   may be lost: polling is the source of truth.
-- * Time is always the database's: now() (transaction start).
--
-- Custom SQLSTATEs raised by the functions (mapped to perdure errors in Python):
--   PD001 invalid argument (ValidationError)
--   PD002 run not found (RunNotFound; DETAIL = the run id)
--   PD003 idempotency conflict (IdempotencyConflict; DETAIL = the existing run id)

CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------- tables

CREATE TABLE runs (
    id                    text COLLATE "C" PRIMARY KEY,
    workflow              text NOT NULL,
    version               integer NOT NULL,
    status                text NOT NULL
        CHECK (status IN ('pending', 'running', 'waiting', 'completed', 'failed', 'cancelled')),
    input                 jsonb NOT NULL,
    output                json,
    error                 jsonb,
    attempt               integer NOT NULL DEFAULT 1,
    priority              integer NOT NULL DEFAULT 100,
    idempotency_key       text,
    parent_id             text COLLATE "C",
    parent_step           text,
    available_at          timestamptz NOT NULL,
    wake_reason           text
        CHECK (wake_reason IN ('sleep', 'event', 'retry', 'child', 'version', 'released')),
    lease_owner           text,
    lease_token           bigint NOT NULL DEFAULT 0,
    lease_expires_at      timestamptz,
    deadline_at           timestamptz,
    retention_days        integer NOT NULL DEFAULT 30 CHECK (retention_days >= 0),
    claims_since_progress integer NOT NULL DEFAULT 0,
    step_attempts         integer NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL DEFAULT now(),
    started_at            timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    completed_at          timestamptz
);

-- The one claim path: due live runs, lowest priority first, then oldest.
CREATE INDEX runs_claim_idx ON runs (priority, available_at)
    WHERE status IN ('pending', 'waiting', 'running');
CREATE INDEX runs_workflow_idx ON runs (workflow, id);
CREATE INDEX runs_retention_idx ON runs (completed_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_parent_idx ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX runs_idempotency_idx ON runs (workflow, idempotency_key);
CREATE INDEX runs_input_idx ON runs USING gin (input jsonb_path_ops);

CREATE TABLE steps (
    run_id       text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key          text NOT NULL,
    seq          bigint GENERATED BY DEFAULT AS IDENTITY,
    kind         text NOT NULL CHECK (kind IN ('run', 'sleep', 'wait', 'child', 'rollback')),
    status       text NOT NULL CHECK (status IN ('completed', 'failed', 'retrying')),
    output       json,
    error        jsonb,
    attempts     integer NOT NULL DEFAULT 1,
    started_at   timestamptz,
    completed_at timestamptz,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    type       text NOT NULL,
    data       jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_run_idx ON events (run_id, id);

CREATE TABLE waits (
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key        text NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    event      text NOT NULL,
    match      jsonb,
    timeout_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);
CREATE INDEX waits_event_idx ON waits (event);

CREATE TABLE signals (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    event      text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX signals_run_idx ON signals (run_id, event, id);

CREATE TABLE subscriptions (
    pattern    text NOT NULL CHECK (pattern ~ '^[A-Za-z0-9_.*-]{1,128}$'),
    workflow   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pattern, workflow)
);

CREATE TABLE workflows (
    name          text NOT NULL,
    version       integer NOT NULL,
    options       jsonb NOT NULL DEFAULT '{}',
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE workers (
    id           text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    workflows    jsonb NOT NULL DEFAULT '[]',
    concurrency  integer NOT NULL,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    stopped_at   timestamptz
);

CREATE TABLE published (
    key        text PRIMARY KEY,
    result     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------- helpers

-- A new run id: a ULID (48-bit milliseconds + 80 random bits, Crockford base32),
-- 26 characters that sort by creation time, like perdure.ids.new_run_id().
CREATE FUNCTION new_run_id() RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_alphabet constant text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    v_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_bytes bytea := uuid_send(gen_random_uuid());
    v_hi bigint := 0;
    v_lo bigint := 0;
    v_out text := '';
    v_i integer;
BEGIN
    -- 40 random bits from bytes 0-4 and 40 from bytes 10-14 (a v4 uuid keeps its
    -- version and variant bits in bytes 6 and 8).
    FOR v_i IN 0..4 LOOP
        v_hi := (v_hi << 8) | get_byte(v_bytes, v_i);
        v_lo := (v_lo << 8) | get_byte(v_bytes, v_i + 10);
    END LOOP;
    FOR v_i IN REVERSE 9..0 LOOP
        v_out := v_out || substr(v_alphabet, ((v_ms >> (5 * v_i)) & 31)::integer + 1, 1);
    END LOOP;
    FOR v_i IN REVERSE 7..0 LOOP
        v_out := v_out || substr(v_alphabet, ((v_hi >> (5 * v_i)) & 31)::integer + 1, 1);
    END LOOP;
    FOR v_i IN REVERSE 7..0 LOOP
        v_out := v_out || substr(v_alphabet, ((v_lo >> (5 * v_i)) & 31)::integer + 1, 1);
    END LOOP;
    RETURN v_out;
END
$$;

-- A topic pattern ('*' matches any characters) as a LIKE pattern with escape '\'.
CREATE FUNCTION like_pattern(p_pattern text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SECURITY INVOKER SET search_path FROM CURRENT AS $$
    SELECT replace(replace(replace(replace(p_pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;

-- Send a notice for a run: kind 'w' (wake) and 'c' (cancel) go to '<schema>.wake',
-- kind 'd' (done) to '<schema>.done'. Delivered when the transaction commits.
CREATE FUNCTION send_notice(p_kind text, p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify(
        current_schema() || CASE WHEN p_kind = 'd' THEN '.done' ELSE '.wake' END,
        p_kind || ':' || p_run_id);
    RETURN true;
END
$$;

-- Write one journal row unless a final (completed or failed) row holds the key.
-- Returns true if the row was written.
CREATE FUNCTION write_step(
    p_run_id text, p_key text, p_kind text, p_status text, p_output json, p_error jsonb,
    p_attempts integer, p_started_at timestamptz, p_completed_at timestamptz
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO steps AS s (run_id, key, kind, status, output, error, attempts,
                            started_at, completed_at, recorded_at)
    VALUES (p_run_id, p_key, p_kind, p_status, p_output, p_error, p_attempts,
            p_started_at, coalesce(p_completed_at, now()), now())
    ON CONFLICT (run_id, key) DO UPDATE SET
        seq = excluded.seq, kind = excluded.kind, status = excluded.status,
        output = excluded.output, error = excluded.error, attempts = excluded.attempts,
        started_at = excluded.started_at, completed_at = excluded.completed_at,
        recorded_at = excluded.recorded_at
    WHERE s.status = 'retrying';
    RETURN FOUND;
END
$$;

-- ---------------------------------------------------------------------- producers

-- Insert a run (status pending) with its 'created' event and a wake notice, or find
-- the run that already holds its id or (workflow, idempotency key). No validation:
-- create_run() validates; apply_transition() and publish() pass trusted values.
CREATE FUNCTION insert_run(
    p_id text, p_workflow text, p_version integer, p_input jsonb, p_priority integer,
    p_idempotency_key text, p_available_at timestamptz, p_deadline_at timestamptz,
    p_retention_days integer, p_parent_id text, p_parent_step text,
    OUT created boolean, OUT run runs
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO runs (id, workflow, version, status, input, priority, idempotency_key,
                      parent_id, parent_step, available_at, deadline_at, retention_days)
    VALUES (p_id, p_workflow, p_version, 'pending', p_input, p_priority, p_idempotency_key,
            p_parent_id, p_parent_step, p_available_at, p_deadline_at, p_retention_days)
    ON CONFLICT DO NOTHING
    RETURNING * INTO run;
    IF FOUND THEN
        created := true;
        INSERT INTO events (run_id, type, data)
        VALUES (p_id, 'created', jsonb_strip_nulls(jsonb_build_object(
            'workflow', p_workflow, 'version', p_version, 'parent_id', p_parent_id)));
        -- Also for a delayed run: workers re-read their next wake-up time.
        PERFORM send_notice('w', p_id);
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

-- Start a run: validate the arguments, insert the run idempotently (see insert_run)
-- and raise PD003 if the idempotency key already names a run with another input.
-- Times: p_run_at, else now() + p_delay seconds; p_deadline_at, else now() +
-- p_deadline_in seconds (NULL: no deadline).
CREATE FUNCTION create_run(
    p_id text, p_workflow text, p_version integer, p_input jsonb,
    p_priority integer DEFAULT 100, p_idempotency_key text DEFAULT NULL,
    p_delay double precision DEFAULT 0, p_run_at timestamptz DEFAULT NULL,
    p_deadline_in double precision DEFAULT NULL, p_deadline_at timestamptz DEFAULT NULL,
    p_retention_days integer DEFAULT 30, p_parent_id text DEFAULT NULL,
    p_parent_step text DEFAULT NULL,
    OUT created boolean, OUT run runs
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_result record;
BEGIN
    IF p_id IS NULL OR p_id !~ '^[0-9A-HJKMNP-TV-Z]{26}$' THEN
        RAISE EXCEPTION 'invalid run id %: expected a 26-character ULID', quote_nullable(p_id)
            USING ERRCODE = 'PD001';
    END IF;
    IF p_workflow IS NULL OR p_workflow !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid workflow name %: use 1-128 letters, digits, ''_'', ''.'' or ''-'', starting with a letter or digit',
            quote_nullable(p_workflow) USING ERRCODE = 'PD001';
    END IF;
    IF p_version IS NULL OR p_version < 1 THEN
        RAISE EXCEPTION 'invalid workflow version %: expected an integer >= 1',
            quote_nullable(p_version) USING ERRCODE = 'PD001';
    END IF;
    IF p_input IS NULL THEN
        RAISE EXCEPTION 'the input must be a JSON value (use ''null''::jsonb for none), not SQL NULL'
            USING ERRCODE = 'PD001';
    END IF;
    IF p_priority IS NULL THEN
        RAISE EXCEPTION 'priority must be an integer, not NULL' USING ERRCODE = 'PD001';
    END IF;
    IF p_retention_days IS NULL OR p_retention_days < 0 THEN
        RAISE EXCEPTION 'invalid retention_days %: expected an integer >= 0',
            quote_nullable(p_retention_days) USING ERRCODE = 'PD001';
    END IF;
    IF p_delay IS NOT NULL AND NOT (p_delay >= 0 AND p_delay < 'Infinity') THEN
        RAISE EXCEPTION 'invalid delay %: expected a finite number of seconds >= 0', p_delay
            USING ERRCODE = 'PD001';
    END IF;
    IF p_deadline_in IS NOT NULL AND NOT (p_deadline_in >= 0 AND p_deadline_in < 'Infinity') THEN
        RAISE EXCEPTION 'invalid deadline %: expected a finite number of seconds >= 0',
            p_deadline_in USING ERRCODE = 'PD001';
    END IF;
    IF p_run_at IN ('infinity', '-infinity') OR p_deadline_at IN ('infinity', '-infinity') THEN
        RAISE EXCEPTION 'run_at and deadline_at must be finite times' USING ERRCODE = 'PD001';
    END IF;
    IF p_idempotency_key = '' THEN
        RAISE EXCEPTION 'the idempotency key must not be empty' USING ERRCODE = 'PD001';
    END IF;
    IF (p_parent_id IS NULL) <> (p_parent_step IS NULL) THEN
        RAISE EXCEPTION 'parent_id and parent_step go together' USING ERRCODE = 'PD001';
    END IF;

    SELECT * INTO v_result FROM insert_run(
        p_id, p_workflow, p_version, p_input, p_priority, p_idempotency_key,
        coalesce(p_run_at, now() + make_interval(secs => coalesce(p_delay, 0))),
        coalesce(p_deadline_at, now() + make_interval(secs => p_deadline_in)),
        p_retention_days, p_parent_id, p_parent_step);
    created := v_result.created;
    run := v_result.run;
    IF NOT created AND (run.input <> p_input OR run.workflow <> p_workflow) THEN
        RAISE EXCEPTION 'a run of % with idempotency key % already exists with a different input (run %)',
            run.workflow, quote_nullable(run.idempotency_key), run.id
            USING ERRCODE = 'PD003', DETAIL = run.id;
    END IF;
END
$$;

-- The SQL producer (psql, any language): start a run of a registered workflow by
-- name with the highest registered version and its defaults (priority, retention,
-- deadline), idempotently per (workflow, idempotency key). Returns the run id.
-- Example: SELECT perdure.start_run('onboard-user', '{"email": "a@b.c"}');
CREATE FUNCTION start_run(
    p_workflow text, p_input jsonb DEFAULT 'null', p_idempotency_key text DEFAULT NULL,
    p_priority integer DEFAULT NULL, p_run_at timestamptz DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_definition workflows;
    v_result record;
BEGIN
    IF p_workflow IS NULL OR p_workflow !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid workflow name %: use 1-128 letters, digits, ''_'', ''.'' or ''-'', starting with a letter or digit',
            quote_nullable(left(p_workflow, 200)) USING ERRCODE = 'PD001';
    END IF;
    IF p_idempotency_key IS NOT NULL AND (length(p_idempotency_key) > 255 OR p_idempotency_key = '') THEN
        RAISE EXCEPTION 'the idempotency key must be 1-255 characters' USING ERRCODE = 'PD001';
    END IF;
    SELECT * INTO v_definition FROM workflows WHERE name = p_workflow
    ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % is not registered: start a worker that serves it once so the database knows it',
            quote_literal(p_workflow) USING ERRCODE = 'PD004';
    END IF;
    SELECT * INTO v_result FROM create_run(
        new_run_id(), p_workflow, v_definition.version, coalesce(p_input, 'null'::jsonb),
        coalesce(p_priority, (v_definition.options->>'priority')::integer, 100),
        p_idempotency_key, 0, p_run_at,
        (v_definition.options->>'deadline_seconds')::double precision, NULL,
        coalesce((v_definition.options->>'retention_days')::integer, 30));
    RETURN (v_result.run).id;
END
$$;

-- ---------------------------------------------------------------------- signals

-- Resolve the wait p_key of a locked live run with p_payload: a completed journal
-- row (kind 'wait', output = payload), the wait deleted, a 'signaled' event, and
-- the run claimable now (wake notice) unless it is running.
CREATE FUNCTION resolve_wait(p_run runs, p_key text, p_event text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_since timestamptz;
BEGIN
    DELETE FROM waits WHERE run_id = p_run.id AND key = p_key RETURNING created_at INTO v_since;
    PERFORM write_step(p_run.id, p_key, 'wait', 'completed', p_payload::text::json, NULL, 1,
                       v_since, NULL);
    INSERT INTO events (run_id, type, data)
    VALUES (p_run.id, 'signaled', jsonb_build_object('step', p_key, 'event', p_event));
    IF p_run.status <> 'running' THEN
        UPDATE runs SET available_at = now(), updated_at = now() WHERE id = p_run.id;
        PERFORM send_notice('w', p_run.id);
    END IF;
END
$$;

-- Validate an event name and payload as the Python API does (PD001 otherwise).
CREATE FUNCTION check_event(p_event text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_event IS NULL OR p_event !~ '^[A-Za-z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION 'invalid event name %: use 1-128 letters, digits, ''.'', ''_'' or ''-''',
            quote_nullable(left(p_event, 200)) USING ERRCODE = 'PD001';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'the payload must be a JSON value, not SQL NULL' USING ERRCODE = 'PD001';
    END IF;
END
$$;

-- Deliver a signal to one run: 'resolved' (a matching wait, oldest first, got it),
-- 'buffered' (stored for the run's next matching wait) or 'ended' (run is over).
-- Raises PD002 if there is no such run.
CREATE FUNCTION signal_run(p_run_id text, p_event text, p_payload jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_key text;
BEGIN
    PERFORM check_event(p_event, p_payload);
    -- The run's row lock serializes this with parking (which registers waits and
    -- consumes buffered signals under the same lock): no lost wake-up.
    SELECT * INTO v_run FROM runs WHERE id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run with id %', quote_nullable(p_run_id)
            USING ERRCODE = 'PD002', DETAIL = coalesce(p_run_id, '');
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
        RETURN 'resolved';
    END IF;
    INSERT INTO signals (run_id, event, payload) VALUES (p_run_id, p_event, p_payload);
    RETURN 'buffered';
END
$$;

-- Publish an event: resolve every matching wait (one per run, as signal_run does)
-- and start one run of every workflow subscribed to a matching pattern (highest
-- registered version, input = payload). Nothing is buffered. With an idempotency
-- key already used, return the first call's result and do nothing.
-- Returns {"started": [run ids], "resumed": [run ids]}.
CREATE FUNCTION publish(p_event text, p_payload jsonb, p_idempotency_key text DEFAULT NULL)
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
            coalesce((v_target.options ->> 'priority')::integer, 100), NULL, now(),
            now() + make_interval(secs => (v_target.options ->> 'deadline_seconds')::double precision),
            coalesce((v_target.options ->> 'retention_days')::integer, 30), NULL, NULL);
        v_started := v_started || (v_new.run).id;
    END LOOP;

    v_result := jsonb_build_object('started', to_jsonb(v_started), 'resumed', to_jsonb(v_resumed));
    IF p_idempotency_key IS NOT NULL THEN
        UPDATE published SET result = v_result WHERE key = p_idempotency_key;
    END IF;
    RETURN v_result;
END
$$;

-- ---------------------------------------------------------------------- endings

-- A child run ended (p_status 'completed' or 'failed'): write the live parent's
-- journal row p_parent_step (kind 'child') and make the parent claimable now
-- unless it is running. Locks the parent (after the child: child-then-parent
-- order) before it writes, so a parent parking at the same time either sees the
-- row or is woken here. Returns true if the parent was woken.
CREATE FUNCTION child_ended(
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

-- Cancel a live run and, recursively, its live children: status 'cancelled', lease
-- cleared, waits and buffered signals deleted, a 'cancelled' event, 'cancel' and
-- 'done' notices. A live parent of the run gets a failed journal row
-- (WorkflowCancelled) and becomes claimable. Returns false if the run had ended;
-- raises PD002 if there is no such run.
CREATE FUNCTION cancel_run(p_run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_ids text[];
BEGIN
    SELECT * INTO v_run FROM runs WHERE id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run with id %', quote_nullable(p_run_id)
            USING ERRCODE = 'PD002', DETAIL = coalesce(p_run_id, '');
    END IF;
    IF v_run.status NOT IN ('pending', 'waiting', 'running') THEN
        RETURN false;
    END IF;

    WITH RECURSIVE tree (id) AS (
        SELECT p_run_id COLLATE "C"
        UNION
        SELECT r.id FROM runs r JOIN tree t ON r.parent_id = t.id
        WHERE r.status IN ('pending', 'waiting', 'running')
    )
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM tree;
    -- Lock the descendants in id order, then keep those still live.
    PERFORM 1 FROM runs WHERE id = ANY (v_ids) AND id <> p_run_id ORDER BY id FOR UPDATE;

    WITH ended AS (
        UPDATE runs SET
            status = 'cancelled', completed_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL, wake_reason = NULL,
            available_at = 'infinity'
        WHERE id = ANY (v_ids) AND status IN ('pending', 'waiting', 'running')
        RETURNING id
    )
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM ended;

    DELETE FROM waits WHERE run_id = ANY (v_ids);
    DELETE FROM signals WHERE run_id = ANY (v_ids);
    INSERT INTO events (run_id, type, data)
    SELECT c.id, 'cancelled',
           CASE WHEN c.id <> p_run_id THEN jsonb_build_object('by', p_run_id) END
    FROM unnest(v_ids) AS c(id);
    PERFORM send_notice('c', c.id), send_notice('d', c.id) FROM unnest(v_ids) AS c(id);

    IF v_run.parent_id IS NOT NULL THEN
        PERFORM child_ended(
            v_run.parent_id, v_run.parent_step, p_run_id, v_run.created_at, 'failed', NULL,
            jsonb_build_object('type', 'WorkflowCancelled',
                               'message', format('run %s was cancelled', p_run_id)));
    END IF;
    RETURN true;
END
$$;

-- ---------------------------------------------------------------------- transitions

-- Apply one fenced transition of a claimed run (the general path: the backend
-- sends transitions without waits or children as one data-modifying statement
-- instead, with the same meaning). Arrays are parallel: one element per journal
-- row / event / wait. p_outcome is 'none', 'park', 'complete', 'fail', 'retry' or
-- 'release'. p_children is a JSON array of new runs. Returns ok = false (and
-- writes nothing) if the run is not running under p_token; else the journal keys
-- written (keys holding a final row already are left out).
CREATE FUNCTION apply_transition(
    p_run_id text, p_token bigint,
    p_keys text[], p_kinds text[], p_statuses text[], p_outputs text[], p_errors text[],
    p_attempts integer[], p_started timestamptz[], p_completed timestamptz[],
    p_event_types text[], p_event_data text[], p_step_attempts integer,
    p_outcome text, p_reason text, p_wake_at timestamptz, p_output text, p_error text,
    p_wait_keys text[], p_wait_events text[], p_wait_matches text[],
    p_wait_timeouts timestamptz[], p_children jsonb,
    OUT ok boolean, OUT written text[]
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
DECLARE
    v_run runs;
    v_child jsonb;
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

    WITH up AS (
        INSERT INTO steps AS s (run_id, key, kind, status, output, error, attempts,
                                started_at, completed_at, recorded_at)
        SELECT p_run_id, u.key, u.kind, u.status, u.output::json, u.error::jsonb, u.attempts,
               u.started_at, coalesce(u.completed_at, now()), now()
        FROM unnest(p_keys, p_kinds, p_statuses, p_outputs, p_errors, p_attempts, p_started,
                    p_completed) WITH ORDINALITY
             AS u(key, kind, status, output, error, attempts, started_at, completed_at, ord)
        ORDER BY u.ord
        ON CONFLICT (run_id, key) DO UPDATE SET
            seq = excluded.seq, kind = excluded.kind, status = excluded.status,
            output = excluded.output, error = excluded.error, attempts = excluded.attempts,
            started_at = excluded.started_at, completed_at = excluded.completed_at,
            recorded_at = excluded.recorded_at
        WHERE s.status = 'retrying'
        RETURNING s.key
    )
    SELECT coalesce(array_agg(up.key), '{}') INTO written FROM up;
    DELETE FROM waits WHERE run_id = p_run_id AND key = ANY (p_keys);

    INSERT INTO events (run_id, type, data)
    SELECT p_run_id, e.type, e.data::jsonb
    FROM unnest(p_event_types, p_event_data) WITH ORDINALITY AS e(type, data, ord)
    ORDER BY e.ord;

    FOR v_child IN SELECT value FROM jsonb_array_elements(coalesce(p_children, '[]')) LOOP
        PERFORM insert_run(
            v_child ->> 'id', v_child ->> 'workflow', (v_child ->> 'version')::integer,
            (v_child ->> 'input_json')::jsonb, (v_child ->> 'priority')::integer,
            v_child ->> 'idempotency_key',
            coalesce((v_child ->> 'run_at')::timestamptz,
                     now() + make_interval(secs => coalesce((v_child ->> 'delay')::double precision, 0))),
            coalesce((v_child ->> 'deadline_at')::timestamptz,
                     now() + make_interval(secs => (v_child ->> 'deadline_in')::double precision)),
            (v_child ->> 'retention_days')::integer, p_run_id, v_child ->> 'parent_step');
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
            v_at := now();
        ELSE
            v_at := coalesce(least(p_wake_at, v_run.deadline_at,
                                   (SELECT min(timeout_at) FROM waits WHERE run_id = p_run_id)),
                             'infinity');
        END IF;
        UPDATE runs SET
            status = 'waiting', lease_owner = NULL, lease_expires_at = NULL,
            wake_reason = p_reason, available_at = v_at
        WHERE id = p_run_id;
        IF v_at <= now() THEN
            PERFORM send_notice('w', p_run_id);
        END IF;
    ELSIF p_outcome IN ('complete', 'fail') THEN
        UPDATE runs SET
            status = CASE WHEN p_outcome = 'complete' THEN 'completed' ELSE 'failed' END,
            output = CASE WHEN p_outcome = 'complete' THEN p_output::json ELSE output END,
            error = CASE WHEN p_outcome = 'complete' THEN NULL ELSE p_error::jsonb END,
            completed_at = now(), lease_owner = NULL, lease_expires_at = NULL,
            wake_reason = NULL, available_at = 'infinity'
        WHERE id = p_run_id;
        DELETE FROM waits WHERE run_id = p_run_id;
        DELETE FROM signals WHERE run_id = p_run_id;
        PERFORM send_notice('d', p_run_id);
        IF v_run.parent_id IS NOT NULL THEN
            PERFORM child_ended(
                v_run.parent_id, v_run.parent_step, p_run_id, v_run.created_at,
                CASE WHEN p_outcome = 'complete' THEN 'completed' ELSE 'failed' END,
                p_output::json, p_error::jsonb);
        END IF;
    ELSIF p_outcome = 'retry' THEN
        v_at := coalesce(least(p_wake_at, v_run.deadline_at), now());
        UPDATE runs SET
            status = 'waiting', wake_reason = 'retry', attempt = attempt + 1,
            error = p_error::jsonb, available_at = v_at,
            lease_owner = NULL, lease_expires_at = NULL
        WHERE id = p_run_id;
        IF v_at <= now() THEN
            PERFORM send_notice('w', p_run_id);
        END IF;
    ELSIF p_outcome = 'release' THEN
        UPDATE runs SET
            status = 'waiting', wake_reason = NULL, available_at = now(),
            lease_owner = NULL, lease_expires_at = NULL
        WHERE id = p_run_id;
        PERFORM send_notice('w', p_run_id);
    ELSIF p_outcome <> 'none' THEN
        RAISE EXCEPTION 'unknown outcome %', quote_nullable(p_outcome) USING ERRCODE = 'PD001';
    END IF;

    UPDATE runs SET
        step_attempts = step_attempts + coalesce(p_step_attempts, 0),
        claims_since_progress = 0,
        updated_at = now()
    WHERE id = p_run_id;
END
$$;
