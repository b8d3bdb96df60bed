-- Privileges, applied after the functions: nothing is executable by PUBLIC; the role
-- perdure_producer (created here when the migrating role may create roles, shared
-- by every perdure schema of the cluster) may use this schema and execute the four
-- producers, and nothing else. Grant it to a service's login role:
--   GRANT perdure_producer TO billing_service;
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'perdure_producer') THEN
        BEGIN
            CREATE ROLE perdure_producer NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another schema's migration created it at the same moment
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'perdure: role perdure_producer not created (this role may not create roles); ask an administrator to run: CREATE ROLE perdure_producer NOLOGIN, then migrate again';
                RETURN;
        END;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO perdure_producer', current_schema());
    EXECUTE format(
        'GRANT EXECUTE ON FUNCTION %1$I.start_run(text, jsonb, text, integer, timestamptz, text),'
        ' %1$I.signal_run(text, text, jsonb, text), %1$I.cancel_run(text),'
        ' %1$I.publish(text, jsonb, text) TO perdure_producer',
        current_schema());
END
$$;
