-- DAG flows from SQL, any language (DESIGN §6): add a step to a flow.

-- Add step `step` to flow `flow` (at `version`; NULL: its highest). `deps` must be
-- steps of the flow already (topological order: no cycle can form). step_type 'map'
-- makes one task per element of `map_over`'s list ('run': the run's input; default:
-- the only dependency, else 'run' when there is none). max_attempts, base_delay and
-- timeout override the flow's, and so does max_tasks, a map step's bound on its tasks
-- (a map over a longer list fails the run). The same definition again is a no-op (returns
-- false); a conflicting one, or a new step of a version that has runs, is refused
-- (PD001): a run keeps the shape it started with.
-- Example: SELECT perdure.add_step('analyze_website', 'sentiment', deps => ARRAY['website']);
CREATE OR REPLACE FUNCTION add_step(
    flow text, step text, deps text[] DEFAULT '{}', max_attempts integer DEFAULT NULL,
    base_delay double precision DEFAULT NULL, timeout double precision DEFAULT NULL,
    step_type text DEFAULT 'single', map_over text DEFAULT NULL, version integer DEFAULT NULL,
    max_tasks integer DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    v_version integer;
    v_deps text[] := coalesce(deps, '{}');
    v_map text := map_over;
    v_existing flow_steps;
    v_existing_deps text[];
    v_dep text;
BEGIN
    SELECT f.version INTO v_version FROM flows f
    WHERE f.name = flow AND (version IS NULL OR f.version = version)
    ORDER BY f.version DESC LIMIT 1 FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%', format('no flow %s%s is stored: call perdure.create_flow first',
            quote_nullable(left(flow, 200)),
            CASE WHEN version IS NULL THEN '' ELSE ' version ' || version END)
            USING ERRCODE = 'PD001';
    END IF;
    IF step IS NULL OR step !~ '^[A-Za-z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION 'invalid step name %: use 1-128 letters, digits, ''.'', ''_'' or ''-''',
            quote_nullable(left(step, 200)) USING ERRCODE = 'PD001';
    END IF;
    IF step_type IS NULL OR step_type NOT IN ('single', 'map') THEN
        RAISE EXCEPTION 'step_type of step % must be ''single'' or ''map'', got %',
            quote_literal(step), quote_nullable(step_type) USING ERRCODE = 'PD001';
    END IF;
    IF (SELECT count(DISTINCT d) FROM unnest(v_deps) AS d) <> cardinality(v_deps)
       OR array_position(v_deps, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'step % lists a dependency twice (or NULL)', quote_literal(step)
            USING ERRCODE = 'PD001';
    END IF;
    IF step = ANY (v_deps) THEN
        RAISE EXCEPTION 'step % of flow % depends on itself (a cycle)', quote_literal(step),
            quote_literal(flow) USING ERRCODE = 'PD001';
    END IF;
    IF step_type = 'map' AND v_map IS NULL THEN
        IF cardinality(v_deps) = 0 THEN
            v_map := 'run';
        ELSIF cardinality(v_deps) = 1 THEN
            v_map := v_deps[1];
        ELSE
            RAISE EXCEPTION 'map step % has several dependencies: say which it maps over (map_over)',
                quote_literal(step) USING ERRCODE = 'PD001';
        END IF;
    ELSIF step_type = 'single' AND v_map IS NOT NULL THEN
        RAISE EXCEPTION 'map_over needs step_type => ''map'' (step %)', quote_literal(step)
            USING ERRCODE = 'PD001';
    END IF;
    IF v_map IS NOT NULL AND v_map <> 'run' AND NOT v_map = ANY (v_deps) THEN
        RAISE EXCEPTION 'map step % of flow % maps over %, which is neither ''run'' nor one of its dependencies',
            quote_literal(step), quote_literal(flow), quote_literal(v_map) USING ERRCODE = 'PD001';
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts of step % must be at least 1, got %', quote_literal(step),
            max_attempts USING ERRCODE = 'PD001';
    END IF;
    IF base_delay IS NOT NULL AND NOT (base_delay >= 0 AND base_delay <= 31536000) THEN
        RAISE EXCEPTION 'base_delay of step % must be at least 0 and at most a year, got %',
            quote_literal(step), base_delay USING ERRCODE = 'PD001';
    END IF;
    IF timeout IS NOT NULL AND NOT (timeout > 0 AND timeout <= 31536000) THEN
        RAISE EXCEPTION 'timeout of step % must be more than 0 and at most a year, got %',
            quote_literal(step), timeout USING ERRCODE = 'PD001';
    END IF;
    IF max_tasks IS NOT NULL AND max_tasks < 1 THEN
        RAISE EXCEPTION 'max_tasks of step % must be at least 1, got %', quote_literal(step),
            max_tasks USING ERRCODE = 'PD001';
    END IF;
    IF max_tasks IS NOT NULL AND v_map IS NULL THEN
        RAISE EXCEPTION 'max_tasks of step % is for map steps only (a single step has one task)',
            quote_literal(step) USING ERRCODE = 'PD001';
    END IF;
    SELECT * INTO v_existing FROM flow_steps s
    WHERE s.flow = flow AND s.version = v_version AND s.step = step;
    IF FOUND THEN
        SELECT coalesce(array_agg(d.dep ORDER BY d.dep_index), '{}') INTO v_existing_deps
        FROM flow_deps d WHERE d.flow = flow AND d.version = v_version AND d.step = step;
        IF v_existing_deps IS DISTINCT FROM v_deps
           OR (v_existing.map_over, v_existing.max_attempts, v_existing.base_delay,
               v_existing.timeout, v_existing.max_tasks)
              IS DISTINCT FROM (v_map, max_attempts, base_delay, timeout, max_tasks) THEN
            RAISE EXCEPTION 'step % of flow % version % is stored with another definition: a changed flow needs a new version',
                quote_literal(step), quote_literal(flow), v_version USING ERRCODE = 'PD001';
        END IF;
        RETURN false;
    END IF;
    FOREACH v_dep IN ARRAY v_deps LOOP
        IF NOT EXISTS (SELECT 1 FROM flow_steps s
                       WHERE s.flow = flow AND s.version = v_version AND s.step = v_dep) THEN
            RAISE EXCEPTION 'step % of flow % depends on unknown step % (add a step''s dependencies before it)',
                quote_literal(step), quote_literal(flow), quote_literal(v_dep)
                USING ERRCODE = 'PD001';
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM runs r WHERE r.workflow = flow AND r.version = v_version
                                      AND r.kind = 'flow') THEN
        RAISE EXCEPTION 'flow % version % has runs already: a changed flow needs a new version',
            quote_literal(flow), v_version USING ERRCODE = 'PD001';
    END IF;
    INSERT INTO flow_steps (flow, version, step, step_index, map_over, max_attempts,
                            base_delay, timeout, max_tasks)
    VALUES (flow, v_version, step,
            (SELECT count(*) FROM flow_steps s WHERE s.flow = flow AND s.version = v_version),
            v_map, max_attempts, base_delay, timeout, max_tasks);
    INSERT INTO flow_deps (flow, version, step, dep, dep_index)
    SELECT flow, v_version, step, d.dep, d.ord - 1
    FROM unnest(v_deps) WITH ORDINALITY AS d(dep, ord);
    RETURN true;
END
$$;
