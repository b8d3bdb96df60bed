-- Journal rows a retry superseded (app.retry(run_id, from_step=...)): kept as history,
-- never replayed. `attempt` is the run's attempt they belonged to.
CREATE TABLE superseded_steps (
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT NOT NULL,
    output        TEXT,
    error         TEXT,
    attempts      INTEGER NOT NULL,
    started_at    REAL,
    completed_at  REAL,
    recorded_at   REAL NOT NULL,
    attempt       INTEGER NOT NULL,
    superseded_at REAL NOT NULL,
    PRIMARY KEY (run_id, attempt, seq)
);
