"""The chaos run, small enough for CI: real workers SIGKILLed every 1-3 s, both backends.

The larger configuration (thousands of runs, a minute of kills, a PostgreSQL restart)
is ``python bench/chaos_large.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import ChaosConfig, run_chaos
from tests.conftest import Database

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def _seed() -> int | None:
    raw = os.environ.get("CHAOS_SEED")
    return int(raw) if raw else None


def test_runs_complete_exactly_once_while_workers_are_killed(
    database: Database, tmp_path: Path
) -> None:
    report = run_chaos(
        ChaosConfig(
            kind=database.kind,
            url=database.url,
            schema=database.schema,
            workdir=tmp_path,
            runs=40,
            workers=3,
            concurrency=4,
            lease=1.5,
            kill_every=(1.0, 3.0),
            start_rate=5.0,  # starts spread over 8 s, so the kills land on live work
            work=0.15,
            nap="300ms",
            early_signals=0.25,  # some signals arrive before the wait (buffered)
            seed=_seed(),
            deadline=90,
        )
    )
    report.assert_ok()
    assert report.statuses == {"completed": 40}
    assert report.kills >= 1
    assert report.journal_rows == report.distinct_journal_keys == 40 * 5
