"""Replay divergence: a deploy that changes a live run's steps parks the run (issue 38).

A worker with code A starts runs that park on a wait; a worker with code B, where
the body changed, takes them: the run parks as diverged, no step's side effect runs
twice, and code A, back, completes it. Two `App`s on one database stand for the two
deploys.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from perdure import App, Context
from perdure.describe import waits_for
from perdure.telemetry import enable_metrics

from .helpers import raw_sql, wait_for

Body = Callable[[Context, Counter[str]], Awaitable[Any]]


def _step(ctx: Context, calls: Counter[str], name: str) -> Awaitable[Any]:
    def effect() -> str:
        calls[name] += 1
        return name

    return ctx.step.run(name, effect)


async def code_a(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await _step(ctx, calls, "two")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    return "done"


async def renamed(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await _step(ctx, calls, "deux")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    return "done"


async def reordered(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "two")
    await _step(ctx, calls, "one")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    return "done"


async def removed(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    return "done"


async def inserted(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "zero")
    await _step(ctx, calls, "one")
    await _step(ctx, calls, "two")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    return "done"


async def changed_kind(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await ctx.step.sleep("two", "1s")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    return "done"


async def returns_early(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    return "done"


async def appended(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await _step(ctx, calls, "two")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "three")
    await _step(ctx, calls, "four")
    return "done"


def _app(database: Any, body: Body, calls: Counter[str], **options: Any) -> App:
    app = App(database.url, schema=database.schema, sweep_interval=0)

    @app.workflow(name="deployed", **options)
    async def deployed(ctx: Context, _: None) -> Any:
        return await body(ctx, calls)

    return app


@pytest.fixture
def calls() -> Counter[str]:
    return Counter()


@pytest.fixture
def apps(database: Any) -> Iterator[list[App]]:
    made: list[App] = []
    yield made
    for app in made:
        app.close()


def _move_clock(app: App, seconds: float) -> None:
    async def move() -> None:
        backend = await app._backend()
        await backend.set_clock_offset(await backend.clock_offset() + seconds)

    app._portal.call(move)


def _diverged(app: App, run_id: str) -> bool:
    run = app.get_run(run_id)
    return run.status == "waiting" and run.wake_reason == "divergence"


def _start_on_a(app_a: App) -> str:
    with app_a.worker():
        run_id = app_a.start("deployed").id
        wait_for(lambda: app_a.get_run(run_id).wake_reason == "event")
    return run_id


@pytest.mark.parametrize(
    "code_b",
    [renamed, reordered, removed, inserted, changed_kind, returns_early],
    ids=lambda f: f.__name__,
)
def test_a_changed_body_parks_the_run_and_the_old_code_completes_it(
    database: Any, apps: list[App], calls: Counter[str], code_b: Body
) -> None:
    app_a = _app(database, code_a, calls)
    app_b = _app(database, code_b, calls)
    apps += [app_a, app_b]
    run_id = _start_on_a(app_a)
    assert calls == Counter({"one": 1, "two": 1})

    with app_b.worker():
        app_b.signal(run_id, "go", {"ok": True})
        wait_for(lambda: _diverged(app_b, run_id))
    run = app_b.get_run(run_id)
    assert run.error is not None and run.error["type"] == "NonDeterminismError"
    assert run.error["worker_version"] == 1
    assert run.error["journaled"] is not None or run.error["asked"] is not None
    said = waits_for(run, app_b.get_events(run_id)) or ""  # runs show, the dashboard
    assert "replay diverged" in said
    events = [e for e in app_b.get_events(run_id) if e.type == "replay_diverged"]
    assert len(events) == 1 and events[0].data["position"] == run.error["position"]
    # Detection comes before any step function: nothing ran twice, nothing new ran.
    assert calls == Counter({"one": 1, "two": 1})

    with app_a.worker():
        _move_clock(app_a, 301)  # past the divergence backoff
        assert app_a.result(run_id, timeout=20) == "done"
    assert calls == Counter({"one": 1, "two": 1, "three": 1})


def test_appending_a_step_after_the_journaled_ones_is_no_divergence(
    database: Any, apps: list[App], calls: Counter[str]
) -> None:
    app_a = _app(database, code_a, calls)
    app_b = _app(database, appended, calls)
    apps += [app_a, app_b]
    run_id = _start_on_a(app_a)
    with app_b.worker():
        app_b.signal(run_id, "go", None)
        assert app_b.result(run_id, timeout=20) == "done"
    assert calls == Counter({"one": 1, "two": 1, "three": 1, "four": 1})
    assert not [e for e in app_b.get_events(run_id) if e.type == "replay_diverged"]


def test_a_random_step_name_parks_on_its_first_replay(
    database: Any, apps: list[App], calls: Counter[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="perdure.runs")

    async def random_name(ctx: Context, calls: Counter[str]) -> Any:
        await _step(ctx, calls, f"pick-{random.randint(0, 10**9)}")
        await ctx.step.wait_for_event("go")
        await _step(ctx, calls, "after")
        return "done"

    app = _app(database, random_name, calls)
    apps.append(app)
    series = enable_metrics().workflow("deployed")  # workflow_replay_divergences_total
    counted = series.divergences
    with app.worker():
        run_id = app.start("deployed").id
        wait_for(lambda: app.get_run(run_id).wake_reason == "event")
        app.signal(run_id, "go", None)
        wait_for(lambda: _diverged(app, run_id))
    assert series.divergences == counted + 1
    warned = [r for r in caplog.records if "replay diverged" in r.getMessage()]
    assert warned and warned[0].levelno == logging.WARNING
    assert sum(calls.values()) == 1  # the pick ran once; "after" never ran
    assert [s.kind for s in app.get_steps(run_id)] == ["run", "wait"]


def test_on_divergence_fail_fails_the_run(
    database: Any, apps: list[App], calls: Counter[str]
) -> None:
    app_a = _app(database, code_a, calls)
    app_b = _app(database, renamed, calls, on_divergence="fail")
    apps += [app_a, app_b]
    run_id = _start_on_a(app_a)
    with app_b.worker():
        app_b.signal(run_id, "go", None)
        wait_for(lambda: app_b.get_run(run_id).status == "failed")
    error = app_b.get_run(run_id).error
    assert error is not None and error["type"] == "NonDeterminismError"
    assert error["journaled"] == {"name": "two", "kind": "run"}
    assert error["asked"] == {"name": "deux", "kind": "run"}
    assert calls == Counter({"one": 1, "two": 1})


def test_parallel_steps_replayed_many_times_never_diverge(
    database: Any, apps: list[App], calls: Counter[str]
) -> None:
    async def parallel(ctx: Context, calls: Counter[str]) -> Any:
        async def branch(i: int) -> None:  # two steps per branch: they interleave
            await _step(ctx, calls, f"a{i}")
            await _step(ctx, calls, f"b{i}")

        for round_ in range(4):
            await asyncio.gather(*(_step(ctx, calls, f"s{round_}-{i}") for i in range(10)))
            await asyncio.gather(*(branch(10 * round_ + i) for i in range(3)))
            await ctx.step.sleep(f"nap{round_}", "1ms")
        return "done"

    app = _app(database, parallel, calls)
    apps.append(app)
    with app.worker():
        handle = app.start("deployed")
        assert handle.result(timeout=30) == "done"
    assert set(calls.values()) == {1}
    assert not [e for e in app.get_events(handle.id) if e.type == "replay_diverged"]


def test_retry_from_a_step_reruns_a_diverged_run_with_the_new_code(
    database: Any, apps: list[App], calls: Counter[str]
) -> None:
    app_a = _app(database, code_a, calls)
    app_b = _app(database, renamed, calls)
    apps += [app_a, app_b]
    run_id = _start_on_a(app_a)
    with app_b.worker():
        app_b.signal(run_id, "go", None)
        wait_for(lambda: _diverged(app_b, run_id))
        app_b.retry(run_id, from_step="two")  # the operator's way out
        wait_for(lambda: app_b.get_run(run_id).wake_reason == "event")
        app_b.signal(run_id, "go", None)
        assert app_b.result(run_id, timeout=20) == "done"
    assert calls == Counter({"one": 1, "two": 1, "deux": 1, "three": 1})
    live = [s.name for s in app_b.get_steps(run_id)]
    assert live == ["one", "deux", "go", "three"]


async def before_patch(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await ctx.step.wait_for_event("go")
    await _step(ctx, calls, "old")
    await ctx.step.wait_for_event("go2")
    return "old"


async def with_patch(ctx: Context, calls: Counter[str]) -> Any:
    await _step(ctx, calls, "one")
    await ctx.step.wait_for_event("go")
    if ctx.patched("fix"):
        await _step(ctx, calls, "new")
        branch = "new"
    else:
        await _step(ctx, calls, "old")
        branch = "old"
    await ctx.step.wait_for_event("go2")
    return branch


def test_patched_old_runs_take_the_old_branch_and_new_runs_the_new(
    database: Any, apps: list[App], calls: Counter[str]
) -> None:
    app_a = _app(database, before_patch, calls)
    app_b = _app(database, with_patch, calls)
    apps += [app_a, app_b]
    with app_a.worker():
        past = app_a.start("deployed").id  # passes the patch point on the old code
        app_a.signal(past, "go", None)
        wait_for(lambda: app_a.get_run(past).wake_reason == "event" and calls["old"] == 1)
        before = app_a.start("deployed").id  # stops short of it
        wait_for(lambda: app_a.get_run(before).wake_reason == "event")
    with app_b.worker():
        fresh = app_b.start("deployed").id
        app_b.signal(before, "go", None)
        app_b.signal(fresh, "go", None)
        wait_for(lambda: calls["new"] == 2)
        for run_id in (past, before, fresh):  # each replays its branch once more
            app_b.signal(run_id, "go2", None)
        assert app_b.result(past, timeout=20) == "old"
        assert app_b.result(before, timeout=20) == "new"
        assert app_b.result(fresh, timeout=20) == "new"
    assert calls == Counter({"one": 3, "old": 1, "new": 2})
    for run_id in (past, before, fresh):
        assert not [e for e in app_b.get_events(run_id) if e.type == "replay_diverged"]


def test_a_run_journaled_before_call_orders_replays_by_name_as_before(
    database: Any, apps: list[App], calls: Counter[str]
) -> None:
    app_a = _app(database, code_a, calls)
    app_b = _app(database, renamed, calls)
    apps += [app_a, app_b]
    run_id = _start_on_a(app_a)
    empty = "[]" if database.kind == "sqlite" else "{}"  # as the migration leaves it
    raw_sql(database, "UPDATE runs SET call_order = ? WHERE id = ?", (empty, run_id))
    with app_b.worker():
        app_b.signal(run_id, "go", None)
        assert app_b.result(run_id, timeout=20) == "done"
    # By name: "deux" is a new step to it, "two" an orphan row, as before call orders.
    assert calls == Counter({"one": 1, "two": 1, "deux": 1, "three": 1})
