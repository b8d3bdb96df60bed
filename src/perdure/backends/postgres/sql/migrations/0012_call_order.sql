-- Replay divergence (docs/versioning.md). Assigned number 0015 on the divergence
-- branch: renumber at merge.
--
-- runs.call_order: the steps the body asked for, in the order it first asked them,
-- as 'kind:key' entries; each transition appends the asks of its pass (the column
-- rides on the fence UPDATE every transition makes: no statement more). A run
-- journaled before this migration keeps '{}' and replays by key, as before.
-- A diverged run parks with wake_reason 'divergence'; 'undecodable' is the sealed
-- value a worker cannot open (the security issue's branch adds it too).
ALTER TABLE runs ADD COLUMN call_order text[] NOT NULL DEFAULT '{}';

ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_wake_reason_check;
ALTER TABLE runs ADD CONSTRAINT runs_wake_reason_check CHECK (wake_reason IN (
    'sleep', 'event', 'retry', 'child', 'version', 'released', 'undecodable', 'divergence'));

-- apply_transition() takes p_asked now.
DROP FUNCTION IF EXISTS apply_transition(
    text, bigint, text[], text[], text[], text[], text[], integer[], timestamptz[],
    timestamptz[], text[], text[], integer, text, text, timestamptz, text, text, text[],
    text[], text[], timestamptz[], jsonb);
