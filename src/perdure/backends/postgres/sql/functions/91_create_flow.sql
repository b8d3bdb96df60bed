-- DAG flows from SQL, any language (DESIGN §6): define a flow, then its steps.

-- Define flow `flow` at `version` with its defaults: max_attempts per task,
-- base_delay (seconds; attempt n is retried after base_delay * 2^n) and timeout
-- (seconds a task may run; a claim's lease defaults to it plus 5); max_tasks: the
-- most tasks a map step creates (a step may set its own): a map over a longer list
-- fails the run and creates none. The same definition again is a no-op (returns
-- false); a conflicting one is refused (PD001).
-- Example: SELECT perdure.create_flow('analyze_website', max_attempts => 3, base_delay => 5, timeout => 60);
CREATE OR REPLACE FUNCTION create_flow(
    flow text, max_attempts integer DEFAULT 3, base_delay double precision DEFAULT 1,
    timeout double precision DEFAULT 60, version integer DEFAULT 1,
    max_tasks integer DEFAULT 10000
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    v_flow flows;
BEGIN
    IF flow IS NULL OR flow !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid flow name %: use 1-128 letters, digits, ''_'', ''.'' or ''-'', starting with a letter or digit',
            quote_nullable(left(flow, 200)) USING ERRCODE = 'PD001';
    END IF;
    IF version IS NULL OR version < 1 THEN
        RAISE EXCEPTION 'invalid version % of flow %: expected an integer >= 1',
            quote_nullable(version), quote_literal(flow) USING ERRCODE = 'PD001';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts of flow % must be at least 1, got %', quote_literal(flow),
            quote_nullable(max_attempts) USING ERRCODE = 'PD001';
    END IF;
    IF base_delay IS NULL OR NOT (base_delay >= 0 AND base_delay <= 31536000) THEN
        RAISE EXCEPTION 'base_delay of flow % must be at least 0 and at most a year, got %',
            quote_literal(flow), quote_nullable(base_delay) USING ERRCODE = 'PD001';
    END IF;
    IF timeout IS NULL OR NOT (timeout > 0 AND timeout <= 31536000) THEN
        RAISE EXCEPTION 'timeout of flow % must be more than 0 and at most a year, got %',
            quote_literal(flow), quote_nullable(timeout) USING ERRCODE = 'PD001';
    END IF;
    IF max_tasks IS NULL OR max_tasks < 1 THEN
        RAISE EXCEPTION 'max_tasks of flow % must be at least 1, got %', quote_literal(flow),
            quote_nullable(max_tasks) USING ERRCODE = 'PD001';
    END IF;
    IF EXISTS (SELECT 1 FROM workflows w WHERE w.name = flow) THEN
        RAISE EXCEPTION '% is registered as a workflow already', quote_literal(flow)
            USING ERRCODE = 'PD001';
    END IF;
    SELECT * INTO v_flow FROM flows f WHERE f.name = flow AND f.version = version FOR UPDATE;
    IF FOUND THEN
        IF (v_flow.max_attempts, v_flow.base_delay, v_flow.timeout, v_flow.max_tasks)
           IS DISTINCT FROM (max_attempts, base_delay, timeout, max_tasks) THEN
            RAISE EXCEPTION 'flow % version % is stored with other options: a changed flow needs a new version',
                quote_literal(flow), version USING ERRCODE = 'PD001';
        END IF;
        RETURN false;
    END IF;
    INSERT INTO flows (name, version, max_attempts, base_delay, timeout, max_tasks)
    VALUES (flow, version, max_attempts, base_delay, timeout, max_tasks);
    RETURN true;
END
$$;
