-- Two more wake reasons: 'undecodable' (a worker could not open the run's sealed values,
-- Backend.park_undecodable) and 'divergence' (a replay diverged from the journal).
ALTER TABLE runs
    DROP CONSTRAINT runs_wake_reason_check,
    ADD CONSTRAINT runs_wake_reason_check CHECK (wake_reason IN (
        'sleep', 'event', 'retry', 'child', 'version', 'released', 'undecodable', 'divergence'));
