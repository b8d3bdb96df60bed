-- Journal rows a retry superseded (app.retry(run_id, from_step=...)): kept as history,
-- never replayed. `attempt` is the run's attempt they belonged to.
CREATE TABLE superseded_steps (
    run_id        text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key           text NOT NULL,
    seq           bigint NOT NULL,
    kind          text NOT NULL,
    status        text NOT NULL,
    output        json,
    error         jsonb,
    attempts      integer NOT NULL,
    started_at    timestamptz,
    completed_at  timestamptz,
    recorded_at   timestamptz NOT NULL,
    attempt       integer NOT NULL,
    superseded_at timestamptz NOT NULL DEFAULT perdure_now(),
    PRIMARY KEY (run_id, seq)
);
