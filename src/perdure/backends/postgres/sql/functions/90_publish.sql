-- The SQL producers: the public functions other services call (any language, psql,
-- triggers). Their parameter names are the user-facing names, so named notation
-- works (`perdure.start_run('wf', '{}', idempotency_key => 'k')`). Each applies every
-- limit the Python API does, then calls the internal function. They run with the
-- owner's rights (SECURITY DEFINER) and a pinned search_path: a role granted only
-- perdure_producer can start, signal, cancel and publish, and touch nothing else.
-- A producer's insert commits with the caller's own transaction.

-- Publish an event: resume every run waiting for it (whose match the payload
-- contains) and start every workflow subscribed to a matching pattern. Returns
-- {"started": [run ids], "resumed": [run ids]}; with an idempotency key used
-- before, the first call's answer, and nothing is done again.
CREATE OR REPLACE FUNCTION publish(
    event text, payload jsonb DEFAULT 'null', idempotency_key text DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM check_value('the payload', publish.payload);
    PERFORM check_id('the idempotency key', publish.idempotency_key);
    RETURN publish_event(publish.event, publish.payload, publish.idempotency_key);
END
$$;
