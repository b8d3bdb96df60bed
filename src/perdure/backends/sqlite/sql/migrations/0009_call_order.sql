-- Replay divergence; the PostgreSQL migration of the same name explains it. Assigned
-- number 0012 on the divergence branch: renumber at merge.
-- SQLite cannot alter a CHECK constraint: the table's stored text is edited (the
-- documented writable_schema procedure; no row changes), and the migration runner
-- bumps the schema version after a migration that does so.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
    '''version'', ''released'')',
    '''version'', ''released'', ''undecodable'', ''divergence'')')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;
ALTER TABLE runs ADD COLUMN call_order TEXT NOT NULL DEFAULT '[]';
