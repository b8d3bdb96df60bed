-- The trace context of the code that started a run (a W3C traceparent): the run's
-- spans join the starter's trace, whichever worker executes it (docs/telemetry.md).
ALTER TABLE runs ADD COLUMN traceparent text;

-- create_run() gained p_traceparent: drop the old signature so the new one replaces it.
DROP FUNCTION IF EXISTS create_run(
    text, text, integer, jsonb, integer, text, double precision, timestamptz,
    double precision, timestamptz, integer, text, text);
