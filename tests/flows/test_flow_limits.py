"""Flow control on DAG flow steps, on both backends: a limited step's tasks carry the
keys computed from the flow run's input at start, and the one limited claim enforces
them across racing workers. Overlaps are recorded by the step bodies themselves; rate
windows are counted from the tasks' recorded start times, under the test clock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from perdure import App, ConfigurationError, ValidationError
from perdure.flows.dsl import TaskContext
from perdure.testing import TestEnvironment

from ..engine.helpers import wait_for
from ..engine.test_limits import Overlaps, workers

pytestmark = pytest.mark.timeout(120)


def task_rows(database: Any, run_id: str) -> list[tuple[Any, ...]]:
    """(step, task_index, concurrency_key, fifo_key, rate_key) of a flow run's tasks,
    read around the engine."""
    sql = (
        "SELECT parent_step, task_index, concurrency_key, fifo_key, rate_key FROM runs"
        " WHERE parent_id = ? AND kind = 'task' ORDER BY parent_step, task_index"
    )
    if database.kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(database.url.split("sqlite:///", 1)[1])
        try:
            return [tuple(r) for r in conn.execute(sql, (run_id,))]
        finally:
            conn.close()
    import psycopg

    options = f"-c search_path={database.schema}"
    with psycopg.connect(database.url, autocommit=True, options=options) as pg:
        return [tuple(r) for r in pg.execute(sql.replace("?", "%s"), (run_id,))]


@contextlib.contextmanager
def other_app(database: Any) -> Iterator[App]:
    """A second process's App on the same database that does not define the flows."""
    app = App(database.url, schema=database.schema, sweep_interval=0)
    try:
        yield app
    finally:
        app.close()


def test_step_concurrency_is_never_exceeded_by_racing_workers(app: App) -> None:
    seen = Overlaps()
    hold = threading.Event()
    flow = app.flow("crawl", base_delay=0)

    @flow.step
    def items(ctx: TaskContext, input: Any) -> list[int]:
        return list(range(30))

    @flow.map(over=items, concurrency=3)
    def fetch(ctx: TaskContext, n: int) -> int:
        with seen.section("fetch"):
            hold.wait(0.02)  # hold the slot a moment so workers race for the others
        return n * 2

    handles = [app.start(flow, {"n": i}) for i in range(2)]
    with workers(app, 3):
        for h in handles:
            assert h.result(timeout=60) == {"fetch": [n * 2 for n in range(30)]}
    assert seen.peak["fetch"] <= 3
    assert seen.peak["fetch"] >= 2  # tasks did run side by side: the test can see overlap


def test_a_step_key_at_its_limit_lets_other_keys_proceed(app: App, database: Any) -> None:
    seen = Overlaps()
    release = threading.Event()
    calls: list[Any] = []

    def tenant(run_input: dict[str, Any]) -> str:
        calls.append(run_input)
        return str(run_input["tenant"])

    flow = app.flow("per_tenant", base_delay=0)

    @flow.step
    def items(ctx: TaskContext, input: dict[str, Any]) -> list[str]:
        return [input["run"]["tenant"]] * input["run"]["n"]

    @flow.map(over=items, concurrency_key=tenant, key_concurrency=1)
    def work(ctx: TaskContext, key: str) -> str:
        with seen.section(key):
            if key == "a":
                assert release.wait(30), "tenant b never ran while a was busy"
        return key

    a_run = app.start(flow, {"tenant": "a", "n": 3})
    b_run = app.start(flow, {"tenant": "b", "n": 2})
    assert calls == [{"tenant": "a", "n": 3}, {"tenant": "b", "n": 2}]  # once per start
    with workers(app, 2):
        # b's tasks ran while a's first task holds the one slot of key "a".
        assert b_run.result(timeout=30) == {"work": ["b", "b"]}
        release.set()
        assert a_run.result(timeout=30) == {"work": ["a", "a", "a"]}
    assert seen.peak == {"a": 1, "b": 1}
    assert len(calls) == 2  # never called again, by the claim or the workers
    # Only the limited step's tasks carry keys; the run's lane is its tenant.
    assert task_rows(database, a_run.id) == [
        ("items", 0, None, None, None),
        ("work", 0, "a", None, None),
        ("work", 1, "a", None, None),
        ("work", 2, "a", None, None),
    ]


def test_a_step_rate_limit_holds_in_every_window_of_the_test_clock(app: App, database: Any) -> None:
    flow = app.flow("paced", base_delay=0)

    @flow.map(over="run", rate_limit="2/1h")
    async def call_api(ctx: TaskContext, n: int) -> int:
        return n

    # worker=False: the environment's settling waits for every run to park, and a
    # flow run is `running` until it ends; the test waits on its tasks instead. The
    # clock moves while no worker runs: on PostgreSQL a claim in flight while the
    # clock function is replaced can judge the window by the new clock and stamp
    # started_at with the old one (a test-clock artifact; real time never jumps).
    with TestEnvironment(app, database.url, worker=False) as env:
        handle = env.start(flow, list(range(5)))

        def done() -> int:
            (step,) = env.get_steps(handle.id)
            return sum(t.status == "completed" for t in step.tasks)

        for completed in (2, 4):  # the rate lets 2 tasks start, then the window is full
            with env.worker():
                wait_for(lambda: done() == completed, timeout=30)  # noqa: B023
            env.advance("61m")
        with env.worker():
            assert handle.result(timeout=30) == {"call_api": [0, 1, 2, 3, 4]}
        (step,) = env.get_steps(handle.id)
    starts = sorted(t.started_at for t in step.tasks if t.started_at is not None)
    assert len(starts) == 5
    for earlier, later in zip(starts, starts[2:], strict=False):
        # The 3rd start after any start comes a full period later: at most 2 per hour.
        assert (later - earlier).total_seconds() >= 3600, [
            (t.index, t.status, t.attempts, str(t.started_at)) for t in step.tasks
        ]


def test_fifo_key_runs_a_keys_tasks_one_at_a_time(app: App) -> None:
    seen = Overlaps()
    flow = app.flow("ordered", base_delay=0)

    @flow.map(over="run", fifo_key=lambda items: f"k{len(items)}")
    def each(ctx: TaskContext, n: int) -> int:
        with seen.section("each"):
            seen.order.append(n)
            threading.Event().wait(0.01)
        return n

    handle = app.start(flow, [1, 2, 3, 4])
    with workers(app, 2):
        assert handle.result(timeout=60) == {"each": [1, 2, 3, 4]}
    assert seen.peak == {"each": 1}
    assert sorted(seen.order) == [1, 2, 3, 4]


def test_a_start_without_the_key_functions_takes_the_steps_one_lane(
    app: App, database: Any
) -> None:
    flow = app.flow("keyed", base_delay=0)

    @flow.step(concurrency_key=lambda i: i["tenant"], key_concurrency=2, rate_limit="100/s")
    def limited(ctx: TaskContext, input: Any) -> str:
        return "ok"

    @flow.step
    def plain(ctx: TaskContext, input: Any) -> str:
        return "ok"

    app.migrate()
    app.start(flow, {"tenant": "t"})  # stores the shape
    with other_app(database) as other:
        handle = other.start("keyed", {"tenant": "t"})  # known only from the database
        assert task_rows(database, handle.id) == [
            ("limited", 0, "", None, ""),
            ("plain", 0, None, None, None),
        ]
    with workers(app, 1):
        assert app.result(handle.id, timeout=30) == {"limited": "ok", "plain": "ok"}


def test_bad_step_limits_are_refused_at_definition(app: App) -> None:
    flow = app.flow("bad_limits")

    @flow.step
    async def a(ctx: TaskContext, input: Any) -> None: ...

    async def body(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ConfigurationError, match="rate_limit"):
        flow.step(name="r1", rate_limit="lots")(body)
    with pytest.raises(ConfigurationError, match=r"step 'r2' of flow 'bad_limits'.*go together"):
        flow.step(name="r2", key_concurrency=2)(body)
    with pytest.raises(ConfigurationError, match="concurrency"):
        flow.map(name="r3", over="run", concurrency=0)(body)
    with pytest.raises(ConfigurationError, match="rate_limit_key needs"):
        flow.map(name="r4", over=a, rate_limit_key=lambda i: i)(body)
    with pytest.raises(ConfigurationError, match="fifo_key must be a function"):
        flow.step(name="r5", fifo_key="tenant")(body)  # type: ignore[call-overload]
    assert [s.name for s in flow.shape.steps] == ["a"]
    assert set(flow.handlers) == {"a"} and flow.limits == {}
    app.start(flow)  # what is stored is the shape without the refused steps
    shape = app.get_flow("bad_limits")
    assert shape is not None and [s.name for s in shape.steps] == ["a"]


def test_a_failing_key_function_stores_nothing(app: App) -> None:
    flow = app.flow("bad_keys")

    @flow.step(concurrency_key=lambda i: i["tenant"], key_concurrency=1)
    async def a(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ValidationError, match="step 'a' of flow 'bad_keys': concurrency_key"):
        app.start(flow, {"no": "tenant"})
    assert app.list_runs(workflow="bad_keys").items == []


def test_step_limits_are_part_of_the_versioned_shape(database: Any) -> None:
    first = App(database.url, schema=database.schema, sweep_interval=0)
    flow = first.flow("limited_v")

    @flow.step(concurrency=2, rate_limit="10/m", fifo_key=lambda i: "k")
    async def a(ctx: TaskContext, input: Any) -> str:
        return "v1"

    first.start(flow)
    stored = first.get_flow("limited_v")
    assert stored is not None
    (step,) = stored.steps
    assert (step.concurrency, step.rate_limit, step.rate_period) == (2, 10, 60.0)
    assert (step.key_concurrency, step.rate_keyed, step.fifo) == (None, False, True)
    first.close()

    second = App(database.url, schema=database.schema, sweep_interval=0)
    changed = second.flow("limited_v")

    @changed.step(name="a", concurrency=3, rate_limit="10/m", fifo_key=lambda i: "k")
    async def a2(ctx: TaskContext, input: Any) -> str:
        return "v1"

    with pytest.raises(ValidationError, match="new version"):
        second.start(changed)
    second.close()

    third = App(database.url, schema=database.schema, sweep_interval=0)
    same = third.flow("limited_v")

    @same.step(name="a", concurrency=2, rate_limit="10/m", fifo_key=lambda i: "other")
    async def a3(ctx: TaskContext, input: Any) -> str:
        return "v1"

    third.start(same)  # another key function is code, not shape: the same version
    third.close()


@pytest.mark.postgres
def test_a_flow_started_from_sql_gives_keyed_steps_the_one_lane(postgres_database: Any) -> None:
    app = App(postgres_database.url, schema=postgres_database.schema, sweep_interval=0)
    try:
        flow = app.flow("from_sql", base_delay=0)

        @flow.map(over="run", concurrency_key=lambda i: "never", key_concurrency=1)
        def each(ctx: TaskContext, n: int) -> int:
            return n

        @flow.step(fifo_key=lambda i: "never", rate_limit_key=lambda i: "x", rate_limit="5/s")
        def once(ctx: TaskContext, input: Any) -> str:
            return "ok"

        app.migrate()
        app.start(flow, [])  # stores the shape
        import psycopg

        with psycopg.connect(postgres_database.url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{postgres_database.schema}"')
            row = conn.execute("SELECT run_id FROM start_flow('from_sql', '[1, 2]')").fetchone()
            assert row is not None
        run_id = row[0]
        # No key function ran: the step's one lane '', a rate limit's '' key, no FIFO key.
        assert task_rows(postgres_database, run_id) == [
            ("each", 0, "", None, None),
            ("each", 1, "", None, None),
            ("once", 0, "", None, ""),
        ]
        with workers(app, 1):
            assert app.result(run_id, timeout=30) == {"each": [1, 2], "once": "ok"}
    finally:
        app.close()


def test_a_limited_steps_shape_round_trips_and_knows_its_keyless_keys() -> None:
    from perdure.flows.definition import FlowShape, StepShape

    limited = StepShape("s", concurrency=2, rate_limit=5, rate_period=1.0, rate_keyed=True)
    fifo = StepShape("f", fifo=True)
    plain = StepShape("p")
    shape = FlowShape("shaped", steps=(limited, fifo, plain))
    assert FlowShape.from_dict(shape.to_dict()) == shape
    assert [s.limited for s in shape.steps] == [True, True, False]
    assert limited.keyless() == ("", None, "")
    assert fifo.keyless() == ("", None, None)
    assert plain.keyless() == (None, None, None)
