"""The public API end to end, through real workers, on both backends."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from perdure import (
    App,
    Context,
    RunNotFound,
    SerializationError,
    TimeoutError,
    ValidationError,
    WorkflowCancelled,
)

from .helpers import wait_for


def test_hello(app: App) -> None:
    @app.workflow
    async def hello(ctx: Context, name: str) -> str:
        return await ctx.step.run("greet", lambda: f"hello {name}")

    with app.worker(concurrency=2):
        assert app.run(hello, "world", timeout=20) == "hello world"


def test_replay_runs_each_step_once_and_journals_it_once(app: App) -> None:
    calls: Counter[str] = Counter()

    def effect(name: str) -> dict[str, str]:
        calls[name] += 1
        return {"step": name}

    @app.workflow
    async def three(ctx: Context, _: None) -> list[str]:
        a = await ctx.step.run("a", lambda: effect("a"))
        await ctx.step.sleep("pause", "100ms")  # parks: the next pass replays "a"
        b = await ctx.step.run("b", lambda: effect("b"))
        c = await ctx.step.run("c", lambda: effect("c"))
        return [a["step"], b["step"], c["step"]]

    with app.worker():
        handle = app.start(three)
        assert handle.result(timeout=20) == ["a", "b", "c"]
    assert calls == Counter({"a": 1, "b": 1, "c": 1})
    steps = app.get_steps(handle.id)
    assert [(s.name, s.kind, s.status) for s in steps] == [
        ("a", "run", "completed"),
        ("pause", "sleep", "completed"),
        ("b", "run", "completed"),
        ("c", "run", "completed"),
    ]
    assert steps[0].output == {"step": "a"}
    types = [e.type for e in app.get_events(handle.id)]
    assert types[0] == "created" and types[-1] == "completed"
    assert types.count("claimed") == 2 and "waiting" in types
    assert types.count("step_completed") == 4


def test_parallel_steps_and_repeated_names(app: App) -> None:
    @app.workflow
    async def fan(ctx: Context, items: list[int]) -> list[int]:
        doubled = await asyncio.gather(
            *(ctx.step.run("double", lambda i=i: i * 2) for i in items)  # type: ignore[misc]
        )
        total = await ctx.step.run("sum", lambda: sum(doubled))
        again = await ctx.step.run("double", lambda: -1)
        return [*doubled, total, again]

    with app.worker():
        handle = app.start(fan, [1, 2, 3])
        assert handle.result(timeout=20) == [2, 4, 6, 12, -1]
    names = {s.name: s.output for s in app.get_steps(handle.id)}
    assert names == {"double": 2, "double:1": 4, "double:2": 6, "sum": 12, "double:3": -1}


def test_sync_steps_run_off_the_event_loop_and_async_steps_are_awaited(app: App) -> None:
    seen: dict[str, object] = {}

    def blocking() -> str:
        seen["thread"] = threading.current_thread().name
        return "sync"

    async def coroutine_fn() -> str:
        await asyncio.sleep(0)
        return "async"

    async def later() -> str:
        return "awaitable"

    @app.workflow
    async def mixed(ctx: Context, _: None) -> list[str]:
        seen["loop_thread"] = threading.current_thread().name
        return [
            await ctx.step.run("sync", blocking),
            await ctx.step.run("async", coroutine_fn),
            await ctx.step.run("lambda", lambda: later()),
        ]

    with app.worker():
        assert app.run(mixed, timeout=20) == ["sync", "async", "awaitable"]
    assert seen["thread"] != seen["loop_thread"]
    assert str(seen["thread"]).startswith("perdure-step")


def test_a_sleeping_run_frees_its_slot(app: App) -> None:
    @app.workflow
    async def sleeper(ctx: Context, _: None) -> str:
        await ctx.step.sleep("long", "1h")
        return "woke"

    @app.workflow
    async def quick(ctx: Context, _: None) -> str:
        return await ctx.step.run("q", lambda: "done")

    with app.worker(concurrency=1):
        parked = app.start(sleeper)
        wait_for(lambda: parked.get().status == "waiting")
        run = parked.get()
        assert run.wake_reason == "sleep" and run.wake_at is not None
        assert run.wake_at > datetime.now(UTC) + timedelta(minutes=50)
        assert app.run(quick, timeout=20) == "done"  # the only slot was free
        assert parked.get().status == "waiting"
        assert app.cancel(parked.id) is True
    with pytest.raises(WorkflowCancelled):
        parked.result(timeout=5)
    assert app.cancel(parked.id) is False


def test_idempotency_keys(app: App) -> None:
    @app.workflow
    async def once(ctx: Context, value: int) -> int:
        return value

    first = app.start(once, 1, idempotency_key="order-42")
    again = app.start(once, 1, idempotency_key="order-42")
    assert first.id == again.id
    assert first.created and not again.created
    differing = app.start(once, 2, idempotency_key="order-42")
    assert differing.id == first.id and not differing.created
    assert [e.type for e in app.get_events(first.id)] == ["created", "duplicate_start"]
    assert len(app.list_runs(once).items) == 1
    chosen = app.start(once, 3, run_id="my-order-7")
    assert chosen.id == "my-order-7" and chosen.created
    assert app.start(once, 3, run_id="my-order-7").created is False
    with app.worker(concurrency=2):
        assert first.result(timeout=20) == 1
        assert chosen.result(timeout=20) == 3


def test_priority_and_delay(app: App) -> None:
    order: list[str] = []

    @app.workflow
    async def job(ctx: Context, name: str) -> str:
        def record() -> str:
            order.append(name)
            return name

        return await ctx.step.run("record", record)

    low = app.start(job, "low", priority=200)
    high = app.start(job, "high", priority=1)
    later = app.start(job, "later", delay="1h")
    assert later.get().status == "pending" and later.get().wake_at is not None
    with app.worker(concurrency=1):
        low.result(timeout=20)
        high.result(timeout=20)
    assert order == ["high", "low"]
    assert later.get().status == "pending"


def test_listing_filters_and_cursor(app: App) -> None:
    @app.workflow
    async def listed(ctx: Context, data: dict[str, object]) -> None:
        return None

    ids = [app.start(listed, {"customer": n % 2, "n": n}).id for n in range(5)]
    page = app.list_runs(listed, limit=2)
    assert [r.id for r in page.items] == ids[::-1][:2]
    rest = app.list_runs(listed, limit=10, cursor=page.next_cursor)
    assert [r.id for r in rest.items] == ids[::-1][2:] and rest.next_cursor is None
    matched = app.list_runs(input_match={"customer": 1})
    assert sorted(r.id for r in matched.items) == sorted(ids[1::2])
    assert app.list_runs(status="completed").items == []
    summary = {w.name: w.counts for w in app.list_workflows()}
    assert summary["listed"]["pending"] == 5 and summary["listed"]["completed"] == 0


def test_bad_input_is_rejected_and_stores_nothing(app: App) -> None:
    @app.workflow
    async def strict(ctx: Context, value: object) -> None:
        return None

    with pytest.raises(ValidationError, match="invalid workflow name"):
        app.start("bad name!")
    with pytest.raises(SerializationError, match="strict"):
        app.start(strict, {"when": datetime.now(UTC)})
    with pytest.raises(ValidationError, match="delay"):
        app.start(strict, delay="soon")
    with pytest.raises(ValidationError, match="priority"):
        app.start(strict, priority="high")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="timezone"):
        app.start(strict, run_at=datetime.now())  # noqa: DTZ005
    assert app.list_runs().items == []
    with pytest.raises(RunNotFound):
        app.get_run("01ARZ3NDEKTSV4RRFFQ69G5FAV")
    with pytest.raises(RunNotFound):
        app.get_run("not even an id")
    with pytest.raises(RunNotFound):
        app.get_steps("nope")


def test_step_api_validates_names(app: App) -> None:
    @app.workflow
    async def bad_step(ctx: Context, _: None) -> None:
        await ctx.step.run("no spaces allowed", lambda: 1)

    with app.worker():
        handle = app.start(bad_step)
        with pytest.raises(Exception, match="invalid step name"):
            handle.result(timeout=20)
    assert handle.get().status == "failed"
    assert app.get_steps(handle.id) == []


def test_result_timeout_leaves_the_run_alone(app: App) -> None:
    @app.workflow
    async def slow(ctx: Context, _: None) -> None:
        await ctx.step.sleep("nap", "1h")

    handle = app.start(slow)
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.2)
    assert handle.get().status == "pending"


def test_workflow_routing_by_glob(app: App) -> None:
    @app.workflow(name="billing.invoice")
    async def invoice(ctx: Context, _: None) -> str:
        return "billed"

    @app.workflow(name="shipping.label")
    async def label(ctx: Context, _: None) -> str:
        return "shipped"

    billed = app.start(invoice)
    shipped = app.start(label)
    with app.worker(workflows=["billing.*"]):
        assert billed.result(timeout=20) == "billed"
        assert shipped.get().status == "pending"
    workers = app.list_workers()
    assert workers and workers[0].workflows == ("billing.invoice@1",)


async def test_async_api_and_serve_in_the_callers_loop(app: App) -> None:
    @app.workflow
    async def add(ctx: Context, pair: list[int]) -> int:
        return await ctx.step.run("add", lambda: pair[0] + pair[1])

    worker = app.worker()
    serving = asyncio.create_task(worker.serve())
    try:
        handle = await app.start_async(add, [2, 3])
        assert await handle.result_async(timeout=20) == 5
        assert (await app.get_run_async(handle.id)).status == "completed"
        assert await app.run_async(add, [4, 4], timeout=20) == 8
    finally:
        worker.stop()
        await serving
        await app.close_async()


def test_versions_keep_the_version_they_started_with(app: App) -> None:
    @app.workflow(name="versioned", version=1)
    async def v1(ctx: Context, _: None) -> str:
        return "v1"

    @app.workflow(name="versioned", version=2)
    async def v2(ctx: Context, _: None) -> str:
        return "v2"

    new = app.start("versioned")
    old = app.start("versioned", version=1)
    assert new.get().version == 2 and old.get().version == 1
    with app.worker():
        assert new.result(timeout=20) == "v2"
        assert old.result(timeout=20) == "v1"
