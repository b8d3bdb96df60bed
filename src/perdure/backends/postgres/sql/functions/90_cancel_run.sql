-- The SQL producers: the public functions other services call (any language, psql,
-- triggers). Their parameter names are the user-facing names, so named notation
-- works (`perdure.start_run('wf', '{}', idempotency_key => 'k')`). Each applies every
-- limit the Python API does, then calls the internal function. They run with the
-- owner's rights (SECURITY DEFINER) and a pinned search_path: a role granted only
-- perdure_producer can start, signal, cancel and publish, and touch nothing else.
-- A producer's insert commits with the caller's own transaction.

-- Cancel a live run and its live children: true if it cancelled it, false if the
-- run had ended. Raises PD002 if there is no such run.
CREATE OR REPLACE FUNCTION cancel_run(run_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    RETURN cancel_tree(cancel_run.run_id);
END
$$;
