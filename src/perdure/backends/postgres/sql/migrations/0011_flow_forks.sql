-- start_flow_run() gained p_copied and p_origin (forks of flow runs): drop the old
-- signature so the new one replaces it instead of standing beside it.
DROP FUNCTION IF EXISTS start_flow_run(text, text, integer, jsonb, integer, text, integer, jsonb);
