-- Replay divergence; the PostgreSQL migration of the same name explains it. (Its
-- wake reason 'divergence' came with 0009_wake_undecodable.)
ALTER TABLE runs ADD COLUMN call_order TEXT NOT NULL DEFAULT '[]';
