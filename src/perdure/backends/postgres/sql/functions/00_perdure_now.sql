-- The clock seam: every due time, lease, deadline and timestamp perdure writes or
-- judges reads perdure_now(), never now() directly, so a test clock moves them all
-- at once by replacing this one function (pg_catalog.now() plus an offset). Plain
-- SQL with no SET clause, so the planner inlines it: it costs what now() costs.
-- Applied before the migrations too: the tables' defaults call it.
CREATE OR REPLACE FUNCTION perdure_now() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT pg_catalog.now() $$;
