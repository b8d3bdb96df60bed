-- create_run() and insert_run() gained p_lease_owner and p_lease (a start handed to a
-- worker of the starting process, leased to it in its own transaction): drop the old
-- signatures so the new ones replace them.
DROP FUNCTION IF EXISTS create_run(
    text, text, integer, jsonb, integer, text, double precision, timestamptz,
    double precision, timestamptz, integer, text, text, text);
DROP FUNCTION IF EXISTS insert_run(
    text, text, integer, jsonb, integer, text, timestamptz, timestamptz, integer, text, text);
