-- Replay divergence (docs/versioning.md).
--
-- runs.call_order: the steps the body asked for, in the order it first asked them,
-- as 'kind:key' entries; each transition appends the asks of its pass (the column
-- rides on the fence UPDATE every transition makes: no statement more). A run
-- journaled before this migration keeps '{}' and replays by key, as before.
-- A diverged run parks with wake_reason 'divergence' (allowed since
-- 0012_wake_undecodable).
ALTER TABLE runs ADD COLUMN call_order text[] NOT NULL DEFAULT '{}';

-- apply_transition() takes p_asked now.
DROP FUNCTION IF EXISTS apply_transition(
    text, bigint, text[], text[], text[], text[], text[], integer[], timestamptz[],
    timestamptz[], text[], text[], integer, text, text, timestamptz, text, text, text[],
    text[], text[], timestamptz[], jsonb);
