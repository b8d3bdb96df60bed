"""Transactional steps under SIGKILL (DESIGN §12): a real worker process is killed at
a random moment around a transactional step's commit, again and again; at the end the
application's rows are exactly the journaled steps, on each backend — never a row
without its journal entry, never a journal entry without its row, never a row twice.
"""

from __future__ import annotations

import os
import random
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from perdure import App
from tests.conftest import Database
from tests.ledger import Ledger

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("CHAOS_KILL_TRIALS", "25"))
RUNS = 30
STEPS = 4


@pytest.fixture
def ledger(database: Database) -> Iterator[Ledger]:
    ledger = Ledger.on(database)
    yield ledger
    ledger.drop()


def test_the_ledger_equals_the_journal_after_kills_around_the_commit(
    ledger: Ledger, database: Database
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": ledger.url,
        "PERDURE_SCHEMA": database.schema,
        "PYTHONPATH": str(REPO),
        "TXN_READY_FD": str(write_fd),
        "TXN_STEPS": str(STEPS),
    }

    def worker() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "perdure.cli.main", "worker", "tests.chaos.txn_workload:app",
             "--lease", "1s", "--concurrency", "2"],
            cwd=REPO, env=env, pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    calls = 0  # step functions that reached their write (one byte each)

    def drain() -> None:
        nonlocal calls
        while True:
            try:
                got = os.read(read_fd, 4096)
            except BlockingIOError:
                return
            if not got:
                return
            calls += len(got)

    app = App(ledger.url, schema=database.schema, sweep_interval=0)
    ids = [app.start("txn").id for _ in range(RUNS)]
    try:
        for _ in range(TRIALS):
            drain()
            proc = worker()
            try:
                ready, _, _ = select.select([read_fd], [], [], 30)
                assert ready, "the worker reached no transactional step within 30 s"
                # Kill inside the step's lingering moment, during its commit, or after.
                time.sleep(rng.uniform(0, 0.006))
            finally:
                proc.kill()
                proc.wait(timeout=10)
        drain()
        final = worker()
        try:
            deadline = time.monotonic() + 90
            while any(app.get_run(i).status != "completed" for i in ids):
                assert time.monotonic() < deadline, "the runs did not complete after the kills"
                time.sleep(0.1)
        finally:
            final.terminate()
            final.wait(timeout=20)
        journal = Counter(
            (run_id, s.name)
            for run_id in ids
            for s in app.get_steps(run_id)
            if s.status == "completed"
        )
        rows = Counter(ledger.rows())
        drain()
        # Attempts whose writes were rolled back by a kill before their commit.
        print(f"{TRIALS} kills, {calls - len(journal)} step attempts rolled back, seed {seed}")
        assert rows == journal, f"seed {seed}"
        assert len(journal) == RUNS * STEPS
        assert all(app.get_run(i).output == STEPS for i in ids)
    finally:
        os.close(read_fd)
        os.close(write_fd)
        app.close()
