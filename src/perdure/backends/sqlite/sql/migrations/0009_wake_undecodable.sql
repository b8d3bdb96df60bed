-- Two more wake reasons: 'undecodable' (a worker could not open the run's sealed values,
-- Backend.park_undecodable) and 'divergence' (a replay diverged from the journal).
--
-- SQLite cannot alter a CHECK constraint. Rebuilding runs would cascade-delete its
-- journal, events and waits (foreign keys cannot be turned off inside the migration's
-- transaction), so the table's stored definition is edited instead, the procedure the
-- SQLite documentation gives for changes that leave the stored rows valid
-- (https://sqlite.org/lang_altertable.html#otheralter): every existing row satisfies
-- the wider constraint. writable_schema=RESET reloads this connection's schema; the
-- table made and dropped after it bumps the schema cookie, so other connections
-- reload theirs too.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''child'', ''version'', ''released'')',
                  '''child'', ''version'', ''released'', ''undecodable'', ''divergence'')')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;
CREATE TABLE schema_cookie_bump (x INTEGER);
DROP TABLE schema_cookie_bump;
