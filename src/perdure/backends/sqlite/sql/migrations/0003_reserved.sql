-- Placeholder: migration 0003 belongs to another branch (issue 16 uses 0006); the
-- integrator replaces this file with that branch's migration.
SELECT 1;
