"""The perdure contenders (PostgreSQL and SQLite) of the benchmark suite.

Setup: one process. The client (an asyncio loop in the main thread, using the
``*_async`` API) and one worker (``app.worker(concurrency=N)`` in a background
thread, its own event loop and connection pool) share the process, as DBOS's
in-process worker does. Step functions are sync (run in the worker's thread pool).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from _common import CommitCounter, Size, fresh_database, percentiles, w1_figures

from perdure import App, Context
from perdure.ids import new_run_id
from perdure.records import NewRun

STARTERS = 16  # concurrent start_async calls of the client


def _small(i: int) -> dict[str, int]:
    return {"i": i}


async def three(ctx: Context, n: int) -> dict[str, int]:
    await ctx.step.run("a", lambda: _small(n))
    await ctx.step.run("b", lambda: _small(n + 1))
    return await ctx.step.run("c", lambda: _small(n + 2))


async def backlog(ctx: Context, n: int) -> dict[str, int]:  # W5: the same body as W1
    await ctx.step.run("a", lambda: _small(n))
    await ctx.step.run("b", lambda: _small(n + 1))
    return await ctx.step.run("c", lambda: _small(n + 2))


async def one(ctx: Context, n: int) -> dict[str, int]:
    return await ctx.step.run("a", lambda: _small(n))


async def many(ctx: Context, steps: int) -> int:
    for i in range(steps):
        await ctx.step.run("s", lambda i=i: _small(i))
    return steps


async def sleeper(ctx: Context, seconds: float) -> dict[str, float]:
    t0 = await ctx.step.run("t0", time.time)
    intended = t0 + seconds
    await ctx.step.sleep_until("nap", datetime.fromtimestamp(intended, UTC))
    return {"late": time.time() - intended}


async def three_limited(ctx: Context, n: int) -> dict[str, int]:  # W1L: limits not binding
    return await three(ctx, n)


async def backlog_keyed(ctx: Context, n: int) -> dict[str, int]:  # W5L: a per-key limit
    return await backlog(ctx, n)


WORKFLOWS: tuple[Callable[..., Any], ...] = (three, backlog, one, many, sleeper)
#: W1L declares a workflow concurrency no run reaches; W5L spreads the backlog over
#: W5L_KEYS concurrency keys with W5L_PER_KEY runs of each at once.
W1L_CONCURRENCY = 1_000_000
W5L_KEYS = 100
W5L_PER_KEY = 5


class PerdureBench:
    def __init__(self, dialect: str, size: Size) -> None:
        self.dialect = dialect
        self.size = size
        if dialect == "pg":
            self.dbname = "bench_perdure_pg"
            self.url = fresh_database(self.dbname)
            self.counter: CommitCounter | None = CommitCounter(self.dbname)
        else:
            self.dir = tempfile.mkdtemp(prefix="bench_perdure_")
            self.path = os.path.join(self.dir, "bench.db")
            self.url = f"sqlite:///{self.path}"
            self.counter = None

    # ------------------------------------------------------------------ helpers

    def app(self, limited: bool = False) -> App:
        """The bench's App; with ``limited``, also W1L's and W5L's limited workflows (a
        worker serving any limited workflow claims through the limited claim, so the
        other workloads leave them out)."""
        app = App(self.url)
        for fn in WORKFLOWS:
            app.workflow(fn)
        if limited:
            app.workflow(concurrency=W1L_CONCURRENCY)(three_limited)
            app.workflow(concurrency_key=lambda n: f"t{n % W5L_KEYS}", key_concurrency=W5L_PER_KEY)(
                backlog_keyed
            )
        return app

    def _poll_conn(self) -> Any:
        if self.dialect == "pg":
            return psycopg.connect(self.url, autocommit=True)
        return sqlite3.connect(self.path, isolation_level=None)

    def _count_completed(self, conn: Any, workflow: str, since: float) -> tuple[int, float | None]:
        """(runs of ``workflow`` completed since ``since`` (epoch), their latest
        completed_at epoch): a cheap read through the completed runs' index, whatever
        the history earlier tries left, so the polling client stays out of the way."""
        if self.dialect == "pg":
            row = conn.execute(
                "SELECT count(*), extract(epoch FROM max(completed_at))::float8 "
                "FROM perdure.runs WHERE completed_at >= to_timestamp(%s) "
                "AND status IN ('completed', 'failed', 'cancelled') "
                "AND workflow = %s AND status = 'completed'",
                (since, workflow),
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT count(*), max(completed_at) FROM runs WHERE completed_at >= ? "
                "AND status IN ('completed', 'failed', 'cancelled') "
                "AND workflow = ? AND status = 'completed'",
                (since, workflow),
            ).fetchone()
        return int(row[0]), (None if row[1] is None else float(row[1]))

    async def _start_many(self, app: App, wf: Any, inputs: list[Any]) -> list[str]:
        ids: list[str] = [""] * len(inputs)
        queue = iter(enumerate(inputs))

        async def starter() -> None:
            for index, value in queue:
                ids[index] = (await app.start_async(wf, value)).id

        await asyncio.gather(*(starter() for _ in range(STARTERS)))
        return ids

    # ------------------------------------------------------------------ W1

    async def w1_once(self, concurrency: int, workflow: Any = three) -> dict[str, Any]:
        n = self.size.w1_runs
        limited = workflow is three_limited
        setup = self.app(limited)
        await setup.list_workflows_async()  # migrate and register before counting
        await setup.close_async()
        before = self.counter.read() if self.counter else 0
        xid0 = self.counter.next_xid() if self.counter else 0
        app = self.app(limited)
        polls = 0
        peak_busy = peak_total = 0
        with app.worker(concurrency=concurrency):
            conn = self._poll_conn()
            started = time.time()
            base, _ = self._count_completed(conn, workflow.__name__, started)
            polls += 1
            ids = await self._start_many(app, workflow, list(range(n)))
            assert len(set(ids)) == n
            starts_done = time.time()
            last = None
            while True:
                done, last = self._count_completed(conn, workflow.__name__, started)
                done -= base
                polls += 1
                if self.counter:
                    busy, total = self.counter.connections()
                    peak_busy, peak_total = max(peak_busy, busy), max(peak_total, total)
                if done == n:
                    break
                await asyncio.sleep(0.1)  # the time is completed_at's: polls only cost
            conn.close()
        await app.close_async()
        after = self.counter.read() if self.counter else 0
        xid1 = self.counter.next_xid() if self.counter else 0
        assert last is not None
        elapsed = last - started
        counts = (after - before - polls, xid1 - xid0, polls, peak_busy, peak_total)
        return w1_figures(
            concurrency, n, elapsed, starts_done - started, counts if self.counter else None
        )

    async def w1_limits(self, concurrency: int) -> dict[str, Any]:
        """W1L against W1 at the same concurrency, four tries each in the order W1L, W1,
        W1, W1L, W1, W1L, W1L, W1 (drift cancels out; a best-of-several W1 beside one
        W1L would not, and a commit-bound try varies by a third from one to the next
        on a cloud disk), after a W1 run that is not counted: the first run on a fresh
        schema is the fastest by far (about 1.3x the next ones), which would favour
        whichever came first."""
        await self.w1_once(concurrency)
        limited, plain = [], []
        abba = (three_limited, three, three, three_limited)
        for workflow in abba + tuple(three if w is three_limited else three_limited for w in abba):
            figures = await self.w1_once(concurrency, workflow)
            (limited if workflow is three_limited else plain).append(figures)
        out = dict(limited[0])
        out["steps_per_s"] = sum(t["steps_per_s"] for t in limited) / len(limited)
        w1 = sum(t["steps_per_s"] for t in plain) / len(plain)
        out["w1_steps_per_s"] = w1
        out["ratio_to_w1"] = out["steps_per_s"] / w1
        out["tries"] = {"w1l": limited, "w1": plain}
        return out

    async def w1(self) -> dict[str, Any]:
        tries = []
        for concurrency in self.size.w1_concurrencies:
            for _ in range(self.size.w1_reps):
                tries.append(await self.w1_once(concurrency))  # noqa: PERF401
        best = max(tries, key=lambda t: t["steps_per_s"])
        return {"best": best, "tries": tries}

    # ------------------------------------------------------------------ W2, W2b, W4

    async def w2_w2b_w4(self, concurrency: int) -> dict[str, Any]:
        app = self.app()
        out: dict[str, Any] = {}
        with app.worker(concurrency=concurrency):
            await app.run_async(one, -1, timeout=30)  # warm up
            lat = []
            for i in range(self.size.w2_runs):
                t = time.perf_counter()
                handle = await app.start_async(one, i)
                await app.result_async(handle.id, timeout=30)
                lat.append(time.perf_counter() - t)
            out["w2"] = percentiles(lat)
            walls = []
            steps = self.size.w2b_steps
            for _ in range(self.size.w2b_reps):
                t = time.perf_counter()
                await app.run_async(many, steps, timeout=60)
                walls.append(time.perf_counter() - t)
            per = sorted(w / steps for w in walls)
            out["w2b"] = {
                "ms_per_step_median": per[len(per) // 2] * 1000,
                "ms_per_step_mean": sum(per) / len(per) * 1000,
            }
            t = time.perf_counter()
            await app.run_async(many, self.size.w4_steps, timeout=600)
            total = time.perf_counter() - t
            out["w4"] = {
                "steps": self.size.w4_steps,
                "seconds": total,
                "ms_per_step": total / self.size.w4_steps * 1000,
                "ratio_to_w2b": (total / self.size.w4_steps * 1000)
                / out["w2b"]["ms_per_step_median"],
            }
        await app.close_async()
        return out

    # ------------------------------------------------------------------ W3

    async def w3(self, concurrency: int) -> dict[str, Any]:
        app = self.app()
        with app.worker(concurrency=concurrency):
            ids = await self._start_many(app, sleeper, [self.size.w3_sleep] * self.size.w3_runs)
            outs = await asyncio.gather(*(app.result_async(i, timeout=60) for i in ids))
        await app.close_async()
        late = [o["late"] for o in outs]
        res = percentiles(late)
        res["runs"] = len(late)
        return res

    # ------------------------------------------------------------------ W5

    async def _bulk_insert(self, app: App, count: int, keyed: bool = False) -> None:
        backend = await app._backend()
        if self.dialect == "pg":
            with psycopg.connect(self.url) as conn:
                for lo in range(0, count, 10_000):
                    ids = [new_run_id() for _ in range(min(10_000, count - lo))]
                    if keyed:  # the function App.start uses for a limited workflow
                        conn.execute(
                            "SELECT count(*) FROM unnest(%s::text[]) WITH ORDINALITY AS t(id, n), "
                            "LATERAL perdure.create_keyed_run(t.id, 'backlog_keyed', 1, "
                            "to_jsonb(t.n + %s - 1), 100, NULL, 0, NULL, NULL, NULL, 30, NULL, "
                            "NULL, 't' || ((t.n + %s - 1) %% %s), NULL, NULL, NULL, NULL)",
                            (ids, lo, lo, W5L_KEYS),
                        )
                    else:
                        conn.execute(
                            "SELECT count(*) FROM unnest(%s::text[]) WITH ORDINALITY AS t(id, n), "
                            "LATERAL perdure.create_run(t.id, 'backlog', 1, to_jsonb(t.n))",
                            (ids,),
                        )
                    conn.commit()
            return
        from perdure.backends.sqlite._rows import insert_run

        def bulk(s: Any, news: list[NewRun]) -> None:
            with s.write() as now:
                for new in news:
                    insert_run(s, new, now, parent_id=None)

        for lo in range(0, count, 10_000):
            news = [
                NewRun(
                    id=new_run_id(),
                    workflow="backlog_keyed" if keyed else "backlog",
                    version=1,
                    input_json=str(i),
                    concurrency_key=f"t{i % W5L_KEYS}" if keyed else None,
                )
                for i in range(lo, min(count, lo + 10_000))
            ]
            await backend._call(bulk, news)  # type: ignore[attr-defined]

    async def w5(self, concurrency: int, keyed: bool = False) -> dict[str, Any]:
        """W5, or with ``keyed`` W5L: the same backlog spread over concurrency keys with
        a per-key limit (the limited claim)."""
        workflow = "backlog_keyed" if keyed else "backlog"
        app = self.app(keyed)
        await app.list_workflows_async()
        t = time.perf_counter()
        await self._bulk_insert(app, self.size.w5_backlog, keyed)
        insert_s = time.perf_counter() - t
        first = self.size.w5_first
        conn = self._poll_conn()
        on = time.time()
        with app.worker(concurrency=concurrency):
            while True:
                if self.dialect == "pg":
                    row = conn.execute(
                        "SELECT extract(epoch FROM completed_at)::float8 FROM perdure.runs "
                        "WHERE workflow = %s AND status = 'completed' "
                        "ORDER BY completed_at OFFSET %s LIMIT 1",
                        (workflow, first - 1),
                    ).fetchone()
                else:
                    row = conn.execute(
                        "SELECT completed_at FROM runs WHERE workflow = ? AND "
                        "status = 'completed' ORDER BY completed_at LIMIT 1 OFFSET ?",
                        (workflow, first - 1),
                    ).fetchone()
                if row is not None:
                    break
                await asyncio.sleep(0.1)
        # The rest of the backlog would take the next workload's worker slots; the
        # vacuum clears the dead rows it leaves (on its own, autovacuum would get to
        # them in the middle of the next workload, and its claims would read past
        # 100,000 dead index entries meanwhile).
        if self.dialect == "pg":
            conn.execute("DELETE FROM perdure.runs WHERE workflow = %s", (workflow,))
            for table in ("runs", "steps", "events", "waits"):
                conn.execute(f"VACUUM ANALYZE perdure.{table}")
        else:
            conn.execute("DELETE FROM runs WHERE workflow = ?", (workflow,))
        conn.close()
        await app.close_async()
        elapsed = float(row[0]) - on
        return {
            "backlog": self.size.w5_backlog,
            "first": first,
            "insert_seconds": insert_s,
            "seconds": elapsed,
            "runs_per_s": first / elapsed,
            "concurrency": concurrency,
        }

    # ------------------------------------------------------------------ all

    async def run_all(self, workloads: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        best_conc = self.size.w1_concurrencies[-1]
        if "W1" in workloads:
            out["w1"] = await self.w1()
            best_conc = out["w1"]["best"]["concurrency"]
        if workloads & {"W2", "W2b", "W4"}:
            out.update(await self.w2_w2b_w4(10))
        if "W3" in workloads:
            out["w3"] = await self.w3(50)
        if "W5" in workloads:
            out["w5"] = await self.w5(best_conc)
        if "W1L" in workloads:  # limits declared, not binding: against W1 in this run
            out["w1_limits"] = await self.w1_limits(best_conc)
        if "W5L" in workloads:  # a per-key limit on: against W5 in this run
            out["w5_limits"] = await self.w5(best_conc, keyed=True)
            out["w5_limits"]["keys"] = W5L_KEYS
            out["w5_limits"]["per_key"] = W5L_PER_KEY
            if "w5" in out:
                out["w5_limits"]["ratio_to_w5"] = (
                    out["w5_limits"]["runs_per_s"] / out["w5"]["runs_per_s"]
                )
        out["setup"] = {
            "process": "one process: client loop in the main thread, one worker "
            "(app.worker) in a background thread",
            "w1_concurrency_tried": list(self.size.w1_concurrencies),
            "w2_w2b_w4_concurrency": 10,
            "w3_concurrency": 50,
            "w5_concurrency": best_conc,
            "client_starters": STARTERS,
        }
        if self.counter:
            self.counter.close()
        return out
