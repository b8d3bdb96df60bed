-- The trace context of the code that started a run (a W3C traceparent): the run's
-- spans join the starter's trace, whichever worker executes it (docs/telemetry.md).
ALTER TABLE runs ADD COLUMN traceparent TEXT;
