-- Let the statement that calls this commit without waiting for its WAL flush
-- (synchronous_commit off for the rest of the transaction: the implicit one of an
-- autocommit statement). For claims and lease renewals, whose loss in a database
-- crash is harmless (docs/storage.md): one statement instead of BEGIN, SET LOCAL,
-- the statement and COMMIT. A statement calls it in the WHERE of its writes, so it is
-- evaluated whenever the statement writes (if it were not, the commit would only wait
-- for the flush). True, so it can stand in a WHERE clause. PL/pgSQL, as every function
-- with a SET clause here: PostgreSQL before 18 plans a SQL function it cannot inline
-- on every call (flow_complete).
CREATE OR REPLACE FUNCTION commit_unsynced() RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    RETURN set_config('synchronous_commit', 'off', true) IS NOT NULL;
END
$$;
