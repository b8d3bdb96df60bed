-- The claim index is split in two: live runs without a lane, and live runs with one
-- (a limited workflow's). The one index used to hold both, so a claim looking for
-- other workflows' runs (the plain part of a limited claim) read past every run of a
-- limited backlog on every claim. Each run is in one of the two, as it was in the one.
-- The plain claim finds runs with a lane (started under limits its worker does not
-- know, e.g. limits since removed) through runs_lane_idx, workflow by workflow, on one
-- claim in eight.
DROP INDEX runs_claim_idx;
CREATE INDEX runs_claim_idx ON runs (priority, available_at)
    WHERE status IN ('pending', 'waiting', 'running') AND concurrency_key IS NULL;
CREATE INDEX runs_keyed_claim_idx ON runs (priority, available_at)
    WHERE status IN ('pending', 'waiting', 'running') AND concurrency_key IS NOT NULL;
