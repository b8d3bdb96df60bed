-- Who watches a run live (App.watch, the REST stream): transitions of a watched run
-- notify '<schema>.progress'; unwatched runs send nothing (a NOTIFY per transition
-- would cost every run the batching of its commits). A watcher refreshes its row
-- while it watches; a row past `until` (its watcher died) no longer counts.
CREATE TABLE watchers (
    run_id   text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    watcher  text NOT NULL,
    until    timestamptz NOT NULL,
    PRIMARY KEY (run_id, watcher)
);
