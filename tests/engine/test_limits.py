"""Flow control end to end: workflows declaring limits, run by racing workers, on both
backends. Overlaps are recorded by the step bodies themselves; rate windows are
counted from the runs' recorded start times."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from perdure import App, ConfigurationError, Context, ValidationError

from .helpers import wait_for

pytestmark = pytest.mark.timeout(120)


class Overlaps:
    """Counts step bodies inside a section at once, overall and per key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.order: list[Any] = []

    @contextlib.contextmanager
    def section(self, *keys: str) -> Any:
        with self._lock:
            for key in keys:
                self.inside[key] = self.inside.get(key, 0) + 1
                self.peak[key] = max(self.peak.get(key, 0), self.inside[key])
        try:
            yield
        finally:
            with self._lock:
                for key in keys:
                    self.inside[key] -= 1


def workers(app: App, n: int, concurrency: int = 4) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for _ in range(n):
        stack.enter_context(app.worker(concurrency=concurrency))
    return stack


def test_concurrency_is_never_exceeded_by_racing_workers(app: App) -> None:
    seen = Overlaps()
    hold = threading.Event()

    @app.workflow(concurrency=3)
    async def limited(ctx: Context, n: int) -> int:
        def work() -> int:
            with seen.section("all"):
                hold.wait(0.05)  # hold the slot a moment so workers race for the others
            return n

        return await ctx.step.run("work", work)

    handles = [app.start(limited, i) for i in range(16)]
    with workers(app, 4):
        assert sorted(h.result(timeout=60) for h in handles) == list(range(16))
    assert seen.peak["all"] <= 3
    assert seen.peak["all"] >= 2  # runs did go side by side: the test can see overlap


def test_a_key_at_its_limit_lets_other_keys_proceed(app: App) -> None:
    seen = Overlaps()
    release = threading.Event()

    @app.workflow(concurrency_key=lambda i: i["tenant"], key_concurrency=1)
    async def per_tenant(ctx: Context, i: dict[str, Any]) -> str:
        def work() -> str:
            with seen.section(i["tenant"]):
                if i["tenant"] == "a":
                    assert release.wait(30), "tenant b never ran while a was busy"
            return str(i["tenant"])

        return await ctx.step.run("work", work)

    a_runs = [app.start(per_tenant, {"tenant": "a", "n": n}) for n in range(3)]
    b_run = app.start(per_tenant, {"tenant": "b"})
    with workers(app, 2):
        assert b_run.result(timeout=30) == "b"  # while a's first run still holds its slot
        release.set()
        assert [h.result(timeout=30) for h in a_runs] == ["a"] * 3
    assert seen.peak == {"a": 1, "b": 1}


def test_fifo_keys_run_one_at_a_time_in_start_order(app: App) -> None:
    seen = Overlaps()

    @app.workflow(fifo_key=lambda i: i["account"])
    async def sync_account(ctx: Context, i: dict[str, Any]) -> None:
        def work() -> None:
            with seen.section(i["account"]):
                seen.order.append((i["account"], i["n"]))
                threading.Event().wait(0.01)

        await ctx.step.run("work", work)

    handles = [
        app.start(sync_account, {"account": account, "n": n})
        for n in range(5)
        for account in ("x", "y")
    ]
    with workers(app, 3):
        for h in handles:
            h.result(timeout=60)
    assert [n for account, n in seen.order if account == "x"] == list(range(5))
    assert [n for account, n in seen.order if account == "y"] == list(range(5))
    assert seen.peak == {"x": 1, "y": 1}


def test_rate_limit_is_never_exceeded_in_any_window(app: App) -> None:
    @app.workflow(rate_limit="3/1s")
    async def limited(ctx: Context, n: int) -> int:
        return n

    handles = [app.start(limited, n) for n in range(10)]
    with workers(app, 3):
        for h in handles:
            h.result(timeout=60)
    starts = sorted(t for h in handles if (t := app.get_run(h.id).started_at) is not None)
    assert len(starts) == len(handles)
    for earlier, later in zip(starts, starts[3:], strict=False):
        # The 4th start after any start comes a full period later: at most 3 per window.
        assert (later - earlier).total_seconds() >= 1.0 - 1e-5, starts


def test_rate_limit_per_key_limits_each_key_alone(app: App) -> None:
    @app.workflow(rate_limit="1/1h", rate_limit_key=lambda i: i["k"])
    async def limited(ctx: Context, i: dict[str, Any]) -> str:
        return str(i["k"])

    first = [app.start(limited, {"k": k, "n": 0}) for k in ("a", "b")]
    held = app.start(limited, {"k": "a", "n": 1})
    with workers(app, 1):
        assert [h.result(timeout=30) for h in first] == ["a", "b"]
        # The second run of "a" waits for the hour; it stays pending, not failed.
        assert app.get_run(held.id).status == "pending"


def test_debounce_runs_once_with_the_last_input(app: App) -> None:
    @app.workflow
    async def reindex(ctx: Context, doc: dict[str, Any]) -> Any:
        return doc["rev"]

    handles = [
        app.start(reindex, {"id": "d1", "rev": rev}, debounce_key="d1", debounce="1s")
        for rev in range(4)
    ]
    assert len({h.id for h in handles}) == 1
    assert [h.created for h in handles] == [True, False, False, False]
    other = app.start(reindex, {"id": "d2", "rev": 9}, debounce_key="d2", debounce="1s")
    with workers(app, 1):
        assert handles[0].result(timeout=30) == 3
        assert other.result(timeout=30) == 9
    again = app.start(reindex, {"id": "d1", "rev": 5}, debounce_key="d1", debounce="1s")
    assert again.created and again.id != handles[0].id


def test_keys_are_computed_once_at_start(app: App) -> None:
    calls: list[Any] = []

    def key(i: dict[str, Any]) -> str:
        calls.append(i)
        return str(i["tenant"])

    @app.workflow(concurrency_key=key, key_concurrency=2)
    async def keyed(ctx: Context, i: dict[str, Any]) -> str:
        return str(i["tenant"])

    handle = app.start(keyed, {"tenant": "t"})
    with workers(app, 1):
        assert handle.result(timeout=30) == "t"
    assert calls == [{"tenant": "t"}]


def test_bad_limit_options_are_refused_at_definition(app: App) -> None:
    async def body(ctx: Context, i: Any) -> None: ...

    with pytest.raises(ConfigurationError, match="rate_limit"):
        app.workflow(name="r1", rate_limit="lots")(body)
    with pytest.raises(ConfigurationError, match="go together"):
        app.workflow(name="r2", key_concurrency=2)(body)
    with pytest.raises(ConfigurationError, match="concurrency"):
        app.workflow(name="r3", concurrency=0)(body)
    with pytest.raises(ConfigurationError, match="rate_limit_key needs"):
        app.workflow(name="r4", rate_limit_key=lambda i: i)(body)


def test_a_failing_key_function_stores_nothing(app: App) -> None:
    @app.workflow(concurrency_key=lambda i: i["tenant"], key_concurrency=1)
    async def keyed(ctx: Context, i: Any) -> None: ...

    with pytest.raises(ValidationError, match="concurrency_key failed"):
        app.start(keyed, {"no": "tenant"})
    with pytest.raises(ValidationError, match="str or int"):
        app.start(keyed, {"tenant": [1]})
    with pytest.raises(ValidationError, match="go together"):
        app.start(keyed, {"tenant": 1}, debounce_key="k")
    with pytest.raises(ValidationError, match="debounce"):
        app.start(keyed, {"tenant": 1}, debounce_key="k", debounce="0s")
    assert app.list_runs().items == []


def lane_of(database: Any, run_id: str) -> Any:
    """The run's stored lane (concurrency_key), read around the engine."""
    if database.kind == "sqlite":
        import sqlite3

        with contextlib.closing(sqlite3.connect(database.url.split("sqlite:///", 1)[1])) as conn:
            return conn.execute(
                "SELECT concurrency_key FROM runs WHERE id = ?", (run_id,)
            ).fetchone()[0]
    import psycopg

    with psycopg.connect(database.url, options=f"-c search_path={database.schema}") as pg:
        row = pg.execute("SELECT concurrency_key FROM runs WHERE id = %s", (run_id,)).fetchone()
        assert row is not None
        return row[0]


def test_a_start_by_name_without_the_code_joins_the_workflows_lane(app: App, database: Any) -> None:
    @app.workflow(concurrency=1)
    async def limited(ctx: Context, i: Any) -> Any:
        return i

    app.start(limited, 0)  # registers the workflow in the database
    producer = App(app.settings.database_url, schema=app.settings.schema, sweep_interval=0)
    try:
        handle = producer.start("limited", 1)
    finally:
        producer.close()
    assert lane_of(database, handle.id) == ""
    with workers(app, 1):
        assert wait_for(lambda: app.get_run(handle.id).status == "completed", timeout=30)


def test_child_runs_of_a_limited_workflow_are_limited(app: App) -> None:
    seen = Overlaps()

    @app.workflow(concurrency=1)
    async def child(ctx: Context, n: int) -> int:
        def work() -> int:
            with seen.section("child"):
                threading.Event().wait(0.05)
            return n

        return await ctx.step.run("work", work)

    @app.workflow
    async def parent(ctx: Context, count: int) -> list[int]:
        import asyncio

        return list(
            await asyncio.gather(*(ctx.step.run_workflow(f"c{i}", child, i) for i in range(count)))
        )

    handle = app.start(parent, 4)
    with workers(app, 2):
        assert handle.result(timeout=60) == [0, 1, 2, 3]
    assert seen.peak == {"child": 1}


def test_runs_started_in_the_database_join_the_workflows_lane(app: App, database: Any) -> None:
    @app.workflow(concurrency=1, rate_limit="10/s", on=["tick.*"])
    async def limited(ctx: Context, i: Any) -> Any:
        return i

    app.list_workflows()  # registers the workflow and its subscription
    (started,) = app.publish("tick.now", {"n": 1}).started
    assert lane_of(database, started) == ""
    if database.kind == "postgres":
        import psycopg

        with psycopg.connect(database.url, options=f"-c search_path={database.schema}") as pg:
            row = pg.execute("SELECT start_run('limited', '{\"n\": 2}')").fetchone()
            assert row is not None
            produced = row[0]
        assert lane_of(database, produced) == ""
    with workers(app, 1):
        assert app.result(started, timeout=30) == {"n": 1}
