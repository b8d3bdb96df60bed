-- The SQL producers: the public functions other services call (any language, psql,
-- triggers). Their parameter names are the user-facing names, so named notation
-- works (`perdure.start_run('wf', '{}', idempotency_key => 'k')`). Each applies every
-- limit the Python API does, then calls the internal function. They run with the
-- owner's rights (SECURITY DEFINER) and a pinned search_path: a role granted only
-- perdure_producer can start, signal, cancel and publish, and touch nothing else.
-- A producer's insert commits with the caller's own transaction.

-- Send a signal to a run: true if it was delivered or buffered for the run, false if
-- the run has ended. The same idempotency key twice delivers once (and answers true
-- again). Raises PD002 if there is no such run.
CREATE OR REPLACE FUNCTION signal_run(
    run_id text, event text, payload jsonb DEFAULT 'null', idempotency_key text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM check_value('the payload', signal_run.payload);
    PERFORM check_id('the idempotency key', signal_run.idempotency_key);
    RETURN deliver_signal(signal_run.run_id, signal_run.event, signal_run.payload,
                          signal_run.idempotency_key) <> 'ended';
END
$$;
