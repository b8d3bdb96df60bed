"""Database restarts at random moments: a live worker keeps the runs it holds.

Each trial starts a few runs on two live worker processes, crash-restarts the
PostgreSQL cluster at a random moment of their lives (stopped with ``-m immediate``,
down for a random while), and waits for the runs to end. The lease is long (60 s),
so a run that a worker dropped and left to a lease expiry could not end within the
trial's bound, and would carry a ``lease_expired`` event: the oracle checks both,
then the journal (one row per step key) of every run.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from perdure import App
from perdure.errors import BackendError
from tests.chaos import workload
from tests.chaos.harness import (
    Probe,
    ThrowawayPostgres,
    WorkerProcess,
    log,
    spawn_worker,
    throwaway_problem,
    worker_env,
)

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

TRIALS = int(os.environ.get("CHAOS_RESTART_TRIALS", "25"))
RUNS_PER_TRIAL = 3
LEASE = 60.0
#: A trial's runs must end this long after the database is back: reconnecting and
#: one poll take a second or two; a lease expiry would take LEASE.
BOUND = 15.0
SPEC = {"wait": False, "sleep": "50ms", "work": 0.05}


def _start(app: App, key: str) -> str:
    """Start a run; the client's pooled connections may have died with the last
    restart, so retry (the idempotency key makes that safe)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return app.start(workload.WORKFLOW, SPEC, idempotency_key=key).id
        except BackendError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _wait_until_serving(probe: Probe, workers: list[WorkerProcess]) -> None:
    deadline = time.monotonic() + 60
    while True:
        rows = probe.retry("SELECT count(*) FROM workers WHERE stopped_at IS NULL")
        if rows[0][0] >= len(workers):
            return
        assert time.monotonic() < deadline, "".join(w.log_tail() for w in workers)
        time.sleep(0.05)


def test_restarts_at_random_moments_never_strand_a_run(
    throwaway_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    log(f"restart trials: {TRIALS}, seed {seed}")
    env = worker_env("postgres", throwaway_pg.url, "perdure", tmp_path / "effects")
    app = workload.register(App(throwaway_pg.url, schema="perdure"))
    app.migrate()
    probe = Probe("postgres", throwaway_pg.url, "perdure")
    workers = [
        spawn_worker(env, tmp_path / "logs", concurrency=4, lease=LEASE, name=str(i))
        for i in range(2)
    ]
    run_ids: list[str] = []
    slowest = 0.0
    try:
        # The bound is about live workers recovering from a restart, so both workers
        # must be serving before the first fault (on a loaded machine starting a Python
        # process takes seconds, and a restart during its pool's first connections
        # delays its start by up to the pool's open timeout).
        _wait_until_serving(probe, workers)
        for trial in range(TRIALS):
            ids = [_start(app, f"{trial}-{i}") for i in range(RUNS_PER_TRIAL)]
            run_ids += ids
            time.sleep(rng.uniform(0.0, 0.4))  # the random moment of the fault
            throwaway_pg.restart(down=rng.uniform(0.0, 0.5))
            back = time.monotonic()
            marks = ",".join("?" for _ in ids)
            while True:
                live = probe.retry(
                    f"SELECT id, status, lease_owner FROM runs WHERE id IN ({marks}) "
                    "AND status NOT IN ('completed', 'failed', 'cancelled')",
                    tuple(ids),
                )
                if not live:
                    break
                waited = time.monotonic() - back
                assert waited < BOUND, (
                    f"trial {trial} (seed {seed}): runs still live {waited:.1f}s after the "
                    f"restart: {live}\n"
                    + "".join(f"\n--- worker {w.pid} ---\n{w.log_tail()}" for w in workers)
                )
                time.sleep(0.05)
            slowest = max(slowest, time.monotonic() - back)
            assert all(w.alive() for w in workers), "a worker process died"
        log(f"slowest recovery after a restart: {slowest:.2f}s (bound {BOUND:g}s)")
        rows = probe.retry(
            "SELECT status, count(*) FROM runs GROUP BY status",
        )
        assert dict(rows) == {"completed": TRIALS * RUNS_PER_TRIAL}
        expired = probe.retry("SELECT count(*) FROM events WHERE type = 'lease_expired'")
        assert expired[0][0] == 0, "a run was left to a lease expiry"
        journal = probe.retry("SELECT run_id, key, count(*) FROM steps GROUP BY run_id, key")
        assert all(count == 1 for _run, _key, count in journal)
        keys = {(run, key) for run, key, _ in journal}
        expected = {(r, k) for r in run_ids for k in workload.journal_keys(SPEC)}
        assert keys == expected
    finally:
        for worker in workers:
            assert worker.stop() == 0, worker.log_tail()
        probe.close()
        app.close()


def test_an_outage_longer_than_the_lease_costs_a_live_worker_none_of_its_runs(
    throwaway_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    """The database stays down for twice the lease while a step runs; the worker keeps
    renewing with its token, so it carries on with the run once the database is back:
    the step runs once and no lease expires."""
    env = worker_env("postgres", throwaway_pg.url, "perdure", tmp_path / "effects")
    app = workload.register(App(throwaway_pg.url, schema="perdure"))
    app.migrate()
    probe = Probe("postgres", throwaway_pg.url, "perdure")
    worker = spawn_worker(env, tmp_path / "logs", concurrency=2, lease=1.5, name="w")
    try:
        run_id = _start(app, "outage")
        spec_hang = {**SPEC, "hang": "a", "hang_for": 4.0}
        hanging = app.start(workload.WORKFLOW, spec_hang, idempotency_key="hang").id
        started = time.monotonic()
        while not (tmp_path / "effects" / f"first-{hanging}-a").exists():
            assert time.monotonic() - started < 30, worker.log_tail()
            time.sleep(0.02)
        # Make the claim durable first (it was committed without waiting for its WAL
        # flush; a synchronous commit after it flushes it), so the crash cannot undo it.
        probe.retry("SELECT pg_switch_wal()")  # writes out and flushes the WAL so far
        throwaway_pg.restart(down=3.0)
        deadline = time.monotonic() + 30
        while True:
            rows = probe.retry(
                "SELECT count(*) FROM runs WHERE status <> 'completed' AND id IN (?, ?)",
                (run_id, hanging),
            )
            if rows[0][0] == 0:
                break
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.05)
        expired = probe.retry("SELECT count(*) FROM events WHERE type = 'lease_expired'")
        assert expired[0][0] == 0, worker.log_tail()
        effects = [
            line
            for p in (tmp_path / "effects").glob("effects-*.log")
            for line in p.read_text().splitlines()
            if line.startswith(f"{hanging}\ta\t")
        ]
        assert len(effects) == 1, worker.log_tail()  # step "a" of the hanging run ran once
        assert worker.alive()
    finally:
        assert worker.stop() == 0, worker.log_tail()
        probe.close()
        app.close()


def test_a_claim_undone_by_a_crash_never_hands_its_token_out_again() -> None:
    """Claims commit without waiting for their WAL flush, so a crash can undo one whose
    worker already runs the body. The next claim must not reuse the undone claim's
    token, or the first worker's writes would pass the fence beside the new holder's."""
    problem = throwaway_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the database-restart tests cannot run ({problem}) and CI is set")
        pytest.skip(problem)
    import asyncio

    from perdure.backends.postgres import PostgresBackend
    from perdure.ids import new_run_id
    from perdure.records import ClaimParams, Complete, NewRun, Transition

    async def scenario(pg: ThrowawayPostgres) -> None:
        pairs = (("wf", 1),)
        backend = PostgresBackend(pg.url, schema="perdure")
        await backend.open()
        await backend.migrate()
        run_id = new_run_id()
        await backend.create_run(NewRun(id=run_id, workflow="wf", version=1, input_json="1"))
        [lost] = await backend.claim_runs(ClaimParams("w-first", pairs, 1, 60))
        await backend.close()
        pg.restart()  # the WAL writer sleeps 10 s: the unsynced claim dies with the server
        backend = PostgresBackend(pg.url, schema="perdure")
        await backend.open()
        try:
            stored = await backend.get_run(run_id)
            assert stored is not None and stored.status == "pending"  # the claim was undone
            [again] = await backend.claim_runs(ClaimParams("w-second", pairs, 1, 60))
            assert again.lease_token != lost.lease_token
            [zombie] = await backend.apply(
                [Transition(run_id, lost.lease_token, outcome=Complete("1"))]
            )
            assert not zombie.ok  # the first worker's write is fenced out
            [holder] = await backend.apply(
                [Transition(run_id, again.lease_token, outcome=Complete("2"))]
            )
            assert holder.ok
        finally:
            await backend.close()

    with ThrowawayPostgres(options="-c wal_writer_delay=10s") as pg:
        asyncio.run(scenario(pg))


def test_a_worker_started_while_the_database_is_down_serves_once_it_is_up(
    throwaway_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    """Workers may start before their database (a deploy, a restart): the worker waits
    for it, with one warning per attempt, instead of dying or hanging."""
    env = worker_env("postgres", throwaway_pg.url, "perdure", tmp_path / "effects")
    app = workload.register(App(throwaway_pg.url, schema="perdure"))
    app.migrate()
    probe = Probe("postgres", throwaway_pg.url, "perdure")
    throwaway_pg.stop()
    worker = spawn_worker(env, tmp_path / "logs", concurrency=2, lease=LEASE, name="early")
    try:
        deadline = time.monotonic() + 30
        while "database unreachable at start" not in worker.log_tail():
            assert worker.alive(), worker.log_tail()
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.05)
        throwaway_pg.start()
        _wait_until_serving(probe, [worker])
        run_id = _start(app, "after-the-outage")
        assert app.result(run_id, timeout=30) is not None
        assert worker.alive()
    finally:
        assert worker.stop() == 0, worker.log_tail()
        probe.close()
        app.close()
