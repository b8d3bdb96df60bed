"""Shared helpers of the benchmark suite: sizes, databases, commit counting, stats."""

from __future__ import annotations

import os
import resource
import signal
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

ADMIN_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass(frozen=True)
class Size:
    """How big each workload is."""

    w1_runs: int
    w1_reps: int
    w2_runs: int
    w2b_reps: int
    w2b_steps: int
    w3_runs: int
    w3_sleep: float
    w4_steps: int
    w5_backlog: int
    w5_first: int
    l_seconds: int
    w1_concurrencies: tuple[int, ...]


FULL = Size(
    w1_runs=2000,
    w1_reps=2,
    w2_runs=200,
    w2b_reps=20,
    w2b_steps=20,
    w3_runs=200,
    w3_sleep=1.0,
    w4_steps=1000,
    w5_backlog=100_000,
    w5_first=1000,
    l_seconds=15,
    w1_concurrencies=(10, 50),
)
QUICK = Size(
    w1_runs=100,
    w1_reps=1,
    w2_runs=10,
    w2b_reps=2,
    w2b_steps=20,
    w3_runs=10,
    w3_sleep=1.0,
    w4_steps=100,
    w5_backlog=1000,
    w5_first=100,
    l_seconds=5,
    w1_concurrencies=(10,),
)


def stop_children_on_sigterm() -> None:
    """Let SIGTERM (``kill``, ``pkill``) end a benchmark as Ctrl-C does: through its
    ``finally`` blocks, which stop the worker processes it started. Killed without
    them, its workers kept serving the next benchmark's database of the same name,
    as a second worker that nobody counted."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def db_url(name: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def fresh_database(name: str) -> str:
    """Drop and create ``name``; return its URL."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    return db_url(name)


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class CommitCounter:
    """``pg_stat_database.xact_commit`` of one database, read from the admin database.

    Backends flush their statistics when they exit, so read only after every
    connection to the database is closed (`read` waits a moment for the flush).
    """

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        self.admin = psycopg.connect(ADMIN_URL, autocommit=True)

    def read(self, settle: float = 0.7) -> int:
        time.sleep(settle)
        row = self.admin.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (self.dbname,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def next_xid(self) -> int:
        """The cluster's next transaction id: its delta counts write transactions
        (read-only ones get no xid) of the whole server, so nothing else may write."""
        row = self.admin.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()
        assert row is not None
        return int(row[0])

    def wal_lsn(self) -> int:
        """The server's WAL insert position in bytes: its delta is the WAL the server
        wrote (every writer on the server, so nothing else may write), a measure of
        database work per step or task that a loaded machine does not blur."""
        row = self.admin.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return int(row[0])

    def connections(self) -> tuple[int, int]:
        """(busy, total) backends on the database now."""
        row = self.admin.execute(
            "SELECT count(*) FILTER (WHERE state IS DISTINCT FROM 'idle'), count(*) "
            "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (self.dbname,),
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def close(self) -> None:
        self.admin.close()


class CpuMeter:
    """CPU time (user + system) spent from `start` on by this process (the client),
    by the given worker processes and by the PostgreSQL server's processes, read from
    ``/proc`` (Linux): where a workload's CPU goes, per run. The server's processes
    are counted whole, so nothing else may use the server meanwhile."""

    def __init__(self, worker_pids: Iterable[int]) -> None:
        self.worker_pids = tuple(worker_pids)
        self._start = self._read()

    def start(self) -> None:
        """Count from now."""
        self._start = self._read()

    def per_run(self, runs: int) -> dict[str, float]:
        """Milliseconds of CPU per run since `start`: client, workers, PostgreSQL."""
        now = self._read()
        return {k: round((now[k] - self._start[k]) / runs * 1000, 3) for k in now}

    def _read(self) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        server = 0.0
        for pid in os.listdir("/proc"):
            if pid.isdigit() and _comm(pid) == "postgres":
                server += _cpu_seconds(pid)
        return {
            "client": usage.ru_utime + usage.ru_stime,
            "workers": sum(_cpu_seconds(str(p)) for p in self.worker_pids),
            "postgres": server,
        }


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _cpu_seconds(pid: str) -> float:
    """User + system CPU seconds of a live process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/mean/max in milliseconds of ``values`` given in seconds."""
    if not values:
        return {}
    ordered = sorted(values)

    def pick(q: float) -> float:
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return ordered[index] * 1000

    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "mean": statistics.fmean(ordered) * 1000,
        "max": ordered[-1] * 1000,
    }


def pg_settings() -> dict[str, Any]:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        out: dict[str, Any] = {}
        for name in ("server_version", "synchronous_commit", "fsync", "shared_buffers"):
            out[name] = admin.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
        return out


def w1_figures(
    concurrency: object,
    runs: int,
    elapsed: float,
    start_seconds: float,
    counts: tuple[int, int, int, int, int] | None,
) -> dict[str, Any]:
    """The W1 figures of one repetition of a 3-step workload. ``counts``: commits (polls
    already subtracted), write transactions, polls, peak busy and peak connections."""
    steps = 3 * runs
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "runs": runs,
        "seconds": elapsed,
        "runs_per_s": runs / elapsed,
        "steps_per_s": steps / elapsed,
        "start_seconds": start_seconds,
    }
    if counts is not None:
        commits, writes, polls, peak_busy, peak_total = counts
        out.update(
            commits=commits,
            commits_per_step=commits / steps,
            write_tx_per_step=writes / steps,
            polls_subtracted=polls,
            peak_busy_connections=peak_busy,
            peak_connections=peak_total,
        )
    return out
