"""Focused faults on real worker processes (DESIGN §5, RELIABILITY A1 A2 A7 A12 B1 C2).

Each test drives ``perdure worker tests.chaos.workload:app`` processes, injects one
fault with a real signal (or a real database restart), and checks the journal, the
side-effect log and the run rows. Waits are on conditions with deadlines, never on
timings.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.chaos.harness import (
    ChaosConfig,
    Lab,
    ThrowawayPostgres,
    WorkerPool,
    WorkerProcess,
    log,
    run_chaos,
    spawn_worker,
    wait_until,
)

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

LEASE = 1.0
ONE_PASS = {"wait": False, "work": 0.0, "sleep": "100ms"}
KEYS = ["a", "b", "c", "nap"]


def _tokens(lab: Lab, run_id: str, key: str) -> list[str]:
    return [e.token for e in lab.effects_of(run_id, key)]


def test_sigkill_inside_a_step_reruns_it_after_the_lease(lab: Lab) -> None:
    first = lab.spawn(lease=LEASE)
    run_id = lab.start(**ONE_PASS, hang="b")
    wait_until(lambda: _tokens(lab, run_id, "b"), 30, "step b to start")
    assert set(lab.journal(run_id)) == {"a"}
    second = lab.spawn(lease=LEASE)  # idle: the run is leased to the first worker
    killed_at = time.monotonic()
    first.kill(signal.SIGKILL)
    lab.wait_status(run_id, "completed", timeout=60)
    log(f"run completed {time.monotonic() - killed_at:.2f}s after the SIGKILL (lease {LEASE}s)")

    b = lab.effects_of(run_id, "b")
    assert [e.pid for e in b] == [first.pid, second.pid]  # the step body ran again
    journal = lab.journal(run_id)
    assert sorted(journal) == KEYS  # one journal row per step
    assert journal["b"] == b[1].token  # the second execution's result is the one recorded
    assert len(_tokens(lab, run_id, "a")) == 1  # committed before the kill: not rerun
    assert lab.events(run_id, "lease_expired") == 1  # taken over once the lease ran out
    assert lab.events(run_id, "completed") == 1


def test_sigkill_right_after_a_steps_commit_does_not_rerun_it(lab: Lab) -> None:
    worker = lab.spawn(lease=LEASE)
    run_id = lab.start(**{**ONE_PASS, "work": 0.3})
    # Kill the moment step "a" is in the journal (step "b" is then running for 0.3 s).
    wait_until(lambda: "a" in lab.journal(run_id), 30, "step a's commit", interval=0.005)
    worker.kill(signal.SIGKILL)
    assert "c" not in lab.journal(run_id)
    lab.spawn(lease=LEASE)
    lab.wait_status(run_id, "completed", timeout=60)

    a = _tokens(lab, run_id, "a")
    assert len(a) == 1  # not re-executed
    journal = lab.journal(run_id)
    assert sorted(journal) == KEYS
    assert journal["a"] == a[0]
    assert lab.events(run_id, "lease_expired") == 1
    assert lab.events(run_id, "completed") == 1


def _sqlite_write_lock_free(lab: Lab) -> bool:
    """True if a write transaction can start now (a stopped process holds no lock)."""
    path = lab.url.split("sqlite:///", 1)[1]
    conn = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def _freeze(lab: Lab, pid: int) -> None:
    """SIGSTOP ``pid`` at a moment it holds no SQLite write lock (a frozen writer would
    block every process on the file: a property of SQLite, not of the engine)."""
    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        if lab.kind != "sqlite" or _sqlite_write_lock_free(lab):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError("could not freeze the worker outside a write transaction")


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("moment", ["mid_step", "result_in_hand"])
def test_zombie_worker_writes_are_rejected(lab: Lab, moment: str) -> None:
    """A worker frozen (SIGSTOP) beyond its lease while its step "b" runs ("mid_step":
    the body sleeps 2 s and ends once thawed), or once the body returned but before
    its result is committed ("result_in_hand": the body stops its own process).
    Another worker takes over, records "b" and is inside step "c" (its first
    execution of "c" sleeps 3 s) when the zombie is thawed (SIGCONT): the run is live
    under the new lease, and the zombie writes nothing (its commit is fenced out, or
    its heartbeat learns it lost the lease first). Exactly one completion."""
    zombie = lab.spawn(lease=LEASE)
    if moment == "mid_step":
        run_id = lab.start(**ONE_PASS, hang=["b", "c"], hang_for=2.0)
        wait_until(lambda: _tokens(lab, run_id, "b"), 30, "step b to start")
        _freeze(lab, zombie.pid)
    else:
        run_id = lab.start(**ONE_PASS, freeze="b", hang="c", hang_for=2.0)
        wait_until(lambda: _stopped(zombie.pid), 30, "the zombie to stop itself in step b")
        if lab.kind == "sqlite" and not _sqlite_write_lock_free(lab):
            os.kill(zombie.pid, signal.SIGCONT)  # another thread held the write lock
            _freeze(lab, zombie.pid)
    try:
        rescuer = lab.spawn(lease=LEASE)
        wait_until(lambda: _tokens(lab, run_id, "c"), 60, "the rescuer to reach step c")
        journal = lab.journal(run_id)
        b = lab.effects_of(run_id, "b")
        assert [e.pid for e in b] == [zombie.pid, rescuer.pid]
        assert journal["b"] == b[1].token
        assert lab.status(run_id)[0] == "running"
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    # A graceful stop lets the thawed zombie finish (and try to commit) what it holds.
    assert zombie.stop() == 0, zombie.log_tail()
    log(f"zombie log:\n{zombie.log_tail()}")
    lab.wait_status(run_id, "completed", timeout=60)
    journal = lab.journal(run_id)
    assert sorted(journal) == KEYS
    assert journal["b"] == b[1].token
    c = lab.effects_of(run_id, "c")
    assert [e.pid for e in c] == [rescuer.pid]  # the zombie never went on to step c
    assert journal["c"] == c[0].token
    assert lab.events(run_id, "completed") == 1
    assert lab.events(run_id, "claimed") == 3  # zombie; rescuer before and after the nap
    assert lab.events(run_id, "lease_expired") == 1
    assert lab.app.get_run(run_id).output == {"a": journal["a"], "b": b[1].token, "c": c[0].token}
    assert len(_tokens(lab, run_id, "b")) == 2


def test_poison_run_fails_as_PoisonRun_and_other_runs_keep_flowing(
    lab: Lab, tmp_path: Path
) -> None:
    limit = 3
    env = {**lab.env, "PERDURE_MAX_RECOVERIES": str(limit)}

    def spawn(name: str) -> WorkerProcess:
        return spawn_worker(env, tmp_path / "logs", concurrency=4, lease=LEASE, name=name)

    pool = WorkerPool(2, spawn, rng=random.Random(0), restart_delay=0.2)
    good = [lab.start(wait=False, work=0.02, sleep="100ms") for _ in range(10)]
    # The poison step works 0.5 s before os._exit(1), so runs claimed with it commit first.
    poison = lab.start(wait=False, work=0.5, sleep="100ms", exit="a")
    pool.start()
    try:
        lab.wait_status(poison, "failed", timeout=90)
        _, error = lab.status(poison)
        assert error is not None and error["type"] == "PoisonRun", error
        for run_id in good:
            lab.wait_status(run_id, "completed", timeout=60)
        deaths = len(pool.unexpected_exits())
        assert deaths == limit, [e.code for e in pool.exits]
        assert len(_tokens(lab, poison, "a")) == limit
        # No crash loop afterwards: new runs complete and no worker dies any more.
        later = [lab.start(wait=False, work=0.02, sleep="100ms") for _ in range(5)]
        for run_id in later:
            lab.wait_status(run_id, "completed", timeout=60)
        assert len(pool.unexpected_exits()) == deaths
        live = pool.live
        codes = pool.shutdown()
        assert codes == [0] * len(live), [(w.pid, w.log_tail()) for w in live]
    finally:
        pool.kill_all()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_sqlite_three_workers_one_file_sigkill_mid_work(lab: Lab) -> None:
    workers = [lab.spawn(concurrency=4, lease=LEASE) for _ in range(3)]
    runs = [lab.start(wait=False, work=0.05, sleep="200ms") for _ in range(60)]
    wait_until(
        lambda: lab.probe.query("SELECT count(*) FROM steps")[0][0] >= 30, 60, "work under way"
    )
    seed = random.SystemRandom().randrange(2**32)
    log(f"seed {seed} (picks the worker to kill)")
    victim = random.Random(seed).choice(workers)
    victim.kill(signal.SIGKILL)
    victim.proc.wait(10)
    assert lab.probe.integrity_check() == "ok"
    for run_id in runs:
        lab.wait_status(run_id, "completed", timeout=90)
    assert lab.probe.integrity_check() == "ok"
    rows = lab.probe.query("SELECT count(*), count(DISTINCT run_id || '/' || key) FROM steps")
    assert rows[0] == (60 * 4, 60 * 4)
    for w in workers:
        if w is not victim:
            assert w.stop() == 0, w.log_tail()


def test_postgres_restart_mid_run_workers_reconnect_and_no_run_is_lost(
    throwaway_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    report = run_chaos(
        ChaosConfig(
            kind="postgres",
            url=throwaway_pg.url,
            workdir=tmp_path,
            runs=40,
            workers=3,
            concurrency=4,
            lease=1.5,
            kill_every=None,  # the only fault is the database restart
            start_rate=8.0,
            work=0.1,
            pg=throwaway_pg,
            pg_restarts=1,
            pg_every=(2.0, 3.0),
            pg_down=(0.5, 1.5),
            deadline=120,
        )
    )
    report.assert_ok()
    assert report.pg_restarts == 1
    assert report.statuses == {"completed": 40}
    assert report.spawned == 3  # no worker process died or was restarted
