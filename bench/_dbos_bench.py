"""The DBOS Transact contenders (PostgreSQL and SQLite system database).

Setup: DBOS's recommended in-process setup, one process: ``DBOS(config=...)`` and
``DBOS.launch()`` in the benchmark process, sync workflows and steps. W1 and W5
use a queue (``DBOS.register_queue``, default options: 1 s polling, no
concurrency limit); W2, W2b, W3 and W4 use direct start
(``DBOS.start_workflow``); W3 sleeps with ``DBOS.sleep``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from _common import CommitCounter, Size, fresh_database, percentiles, w1_figures
from dbos import DBOS, DBOSConfig

STARTERS = 16  # client threads enqueueing/starting concurrently
# W5's queue gets a per-worker concurrency limit: with DBOS's default (no limit) a
# worker dequeues the whole 100,000-run backlog at once, one thread each, and on
# SQLite stops making progress (seen: 283 of 99,717 dequeued runs done after minutes).
W5_WORKER_CONCURRENCY = 50
# Enqueueing on SQLite runs at ~350/s here: the backlog is capped there (stated).
SQLITE_W5_BACKLOG = 20_000


def _small(i: int) -> dict[str, int]:
    return {"i": i}


@DBOS.step()
def step_a(n: int) -> dict[str, int]:
    return _small(n)


@DBOS.step()
def step_now() -> float:
    return time.time()


@DBOS.workflow()
def three(n: int) -> dict[str, int]:
    step_a(n)
    step_a(n + 1)
    return step_a(n + 2)


@DBOS.workflow()
def one(n: int) -> dict[str, int]:
    return step_a(n)


@DBOS.workflow()
def many(steps: int) -> int:
    for i in range(steps):
        step_a(i)
    return steps


@DBOS.workflow()
def sleeper(seconds: float) -> dict[str, float]:
    t0 = step_now()
    intended = t0 + seconds
    DBOS.sleep(max(0.0, intended - time.time()))
    return {"late": time.time() - intended}


class DbosBench:
    def __init__(self, dialect: str, size: Size) -> None:
        self.dialect = dialect
        self.size = size
        if dialect == "pg":
            self.dbname = "bench_dbos_pg"
            self.url = fresh_database(self.dbname)
            self.counter: CommitCounter | None = CommitCounter(self.dbname)
        else:
            self.dir = tempfile.mkdtemp(prefix="bench_dbos_")
            self.path = os.path.join(self.dir, "dbos.sqlite")
            self.url = f"sqlite:///{self.path}"
            self.counter = None

    @contextlib.contextmanager
    def session(self, listen: list[str] | None = None) -> Iterator[None]:
        config: DBOSConfig = {
            "name": "bench",
            "system_database_url": self.url,
            "log_level": "WARNING",
        }
        DBOS(config=config)
        if listen is not None:
            DBOS.listen_queues(listen)
        DBOS.launch()
        try:
            yield
        finally:
            DBOS.destroy()

    def _poll_conn(self) -> Any:
        if self.dialect == "pg":
            return psycopg.connect(self.url, autocommit=True)
        return sqlite3.connect(self.path, isolation_level=None)

    def _sql(self, conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
        schema = "dbos." if self.dialect == "pg" else ""
        sql = sql.replace("{s}", schema)
        if self.dialect == "pg":
            return conn.execute(sql, params).fetchone()
        return conn.execute(sql.replace("%s", "?"), params).fetchone()

    def _completed(self, conn: Any) -> Any:
        """(completed W1 runs, their latest updated_at ms): a cheap read."""
        return self._sql(
            conn,
            "SELECT count(*), max(updated_at) FROM {s}workflow_status "
            "WHERE queue_name = 'w1q' AND status = 'SUCCESS'",
            (),
        )

    # ------------------------------------------------------------------ W1

    def w1_once(self) -> dict[str, Any]:
        n = self.size.w1_runs
        with self.session():
            DBOS.register_queue("w1q")
        before = self.counter.read() if self.counter else 0
        xid0 = self.counter.next_xid() if self.counter else 0
        polls = 0
        peak_busy = peak_total = 0
        with self.session():
            queue = DBOS.retrieve_queue("w1q")
            assert queue is not None
            conn = self._poll_conn()
            base = int(self._completed(conn)[0])
            polls += 1
            started = time.time()
            with ThreadPoolExecutor(STARTERS) as pool:
                ids = list(pool.map(lambda i: queue.enqueue(three, i).workflow_id, range(n)))
            starts_done = time.time()
            while True:
                row = self._completed(conn)
                seen = time.time()
                polls += 1
                if self.counter:
                    busy, total = self.counter.connections()
                    peak_busy, peak_total = max(peak_busy, busy), max(peak_total, total)
                if int(row[0]) - base >= n:
                    break
                time.sleep(0.02 if self.dialect == "sqlite" else 0.05)
            conn.close()
        after = self.counter.read() if self.counter else 0
        xid1 = self.counter.next_xid() if self.counter else 0
        assert len(ids) == n
        # SQLite keeps updated_at in whole seconds: use the observed time there.
        elapsed = (int(row[1]) / 1000 if self.dialect == "pg" else seen) - started
        counts = (after - before - polls, xid1 - xid0, polls, peak_busy, peak_total)
        return w1_figures(
            "default (no limit)",
            n,
            elapsed,
            starts_done - started,
            counts if self.counter else None,
        )

    def w1(self) -> dict[str, Any]:
        tries = [self.w1_once() for _ in range(self.size.w1_reps)]
        return {"best": max(tries, key=lambda t: t["steps_per_s"]), "tries": tries}

    # ------------------------------------------------------------------ W2, W2b, W4

    def w2_w2b_w4(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self.session():
            DBOS.start_workflow(one, -1).get_result()  # warm up
            lat = []
            for i in range(self.size.w2_runs):
                t = time.perf_counter()
                DBOS.start_workflow(one, i).get_result()
                lat.append(time.perf_counter() - t)
            out["w2"] = percentiles(lat)
            steps = self.size.w2b_steps
            walls = []
            for _ in range(self.size.w2b_reps):
                t = time.perf_counter()
                DBOS.start_workflow(many, steps).get_result()
                walls.append(time.perf_counter() - t)
            per = sorted(w / steps for w in walls)
            out["w2b"] = {
                "ms_per_step_median": per[len(per) // 2] * 1000,
                "ms_per_step_mean": sum(per) / len(per) * 1000,
            }
            t = time.perf_counter()
            DBOS.start_workflow(many, self.size.w4_steps).get_result()
            total = time.perf_counter() - t
            out["w4"] = {
                "steps": self.size.w4_steps,
                "seconds": total,
                "ms_per_step": total / self.size.w4_steps * 1000,
                "ratio_to_w2b": (total / self.size.w4_steps * 1000)
                / out["w2b"]["ms_per_step_median"],
            }
        return out

    # ------------------------------------------------------------------ W3

    def w3(self) -> dict[str, Any]:
        with self.session():
            with ThreadPoolExecutor(STARTERS) as pool:
                handles = list(
                    pool.map(
                        lambda _: DBOS.start_workflow(sleeper, self.size.w3_sleep),
                        range(self.size.w3_runs),
                    )
                )
            outs = [h.get_result() for h in handles]
        late = [o["late"] for o in outs]
        res = percentiles(late)
        res["runs"] = len(late)
        return res

    # ------------------------------------------------------------------ W5

    def w5(self) -> dict[str, Any]:
        count, first = self.size.w5_backlog, self.size.w5_first
        if self.dialect == "sqlite":
            count = min(count, SQLITE_W5_BACKLOG)
        with self.session(listen=["w1q"]):  # no worker on w5q: only enqueue
            queue = DBOS.register_queue("w5q", worker_concurrency=W5_WORKER_CONCURRENCY)
            t = time.perf_counter()
            lock = threading.Lock()
            done = [0]

            def enqueue(i: int) -> None:
                queue.enqueue(three, i)
                with lock:
                    done[0] += 1

            with ThreadPoolExecutor(STARTERS) as pool:
                list(pool.map(enqueue, range(count)))
            insert_s = time.perf_counter() - t
        conn = self._poll_conn()
        on = time.time()
        with self.session():
            while True:
                row = self._sql(
                    conn,
                    "SELECT updated_at FROM {s}workflow_status WHERE queue_name = 'w5q' "
                    "AND status = 'SUCCESS' ORDER BY updated_at LIMIT 1 OFFSET %s",
                    (first - 1,),
                )
                if row is not None:
                    break
                time.sleep(0.02 if self.dialect == "sqlite" else 0.1)
            seen = time.time()
            conn.close()
            logging.getLogger("dbos").setLevel(logging.CRITICAL)  # runs cut off at destroy
        # SQLite keeps updated_at in whole seconds: use the observed time there.
        elapsed = (int(row[0]) / 1000 if self.dialect == "pg" else seen) - on
        return {
            "backlog": count,
            "first": first,
            "insert_seconds": insert_s,
            "insert_path": f"Queue.enqueue from {STARTERS} threads",
            "seconds": elapsed,
            "runs_per_s": first / elapsed,
            "worker_concurrency": W5_WORKER_CONCURRENCY,
        }

    def run_all(self, workloads: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "W1" in workloads:
            out["w1"] = self.w1()
        if workloads & {"W2", "W2b", "W4"}:
            out.update(self.w2_w2b_w4())
        if "W3" in workloads:
            out["w3"] = self.w3()
        if "W5" in workloads:
            out["w5"] = self.w5()
        out["setup"] = {
            "process": "one process: DBOS launched in-process (its own worker threads)",
            "w1": "Queue (register_queue defaults), enqueue from 16 threads",
            "w2_w2b_w3_w4": "DBOS.start_workflow (direct)",
        }
        if self.counter:
            self.counter.close()
        return out
