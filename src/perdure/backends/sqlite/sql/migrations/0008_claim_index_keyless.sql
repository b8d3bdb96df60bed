-- PostgreSQL's claim index holds only the runs without a lane from migration 8 on;
-- SQLite's claim queries read the lanes as before. Kept so both number 1..n.
SELECT 1;
