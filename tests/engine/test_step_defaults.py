"""Engine defaults (issue 41): default step retry policies on the workflow and the
app, rollbacks under their step's policy or their own, and steps, sleeps and child
runs that need no name."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import pytest

from perdure import App, Context, RetryPolicy, StepFailed, ValidationError, WorkflowFailed

FAST2 = RetryPolicy(max_attempts=2, initial="10ms", max="10ms", jitter=0)
FAST4 = RetryPolicy(max_attempts=4, initial="10ms", max="10ms", jitter=0)
ONCE = RetryPolicy(max_attempts=1)


def _failing(calls: Counter[str], name: str) -> Any:
    def fail() -> None:
        calls[name] += 1
        raise ConnectionError(f"{name} down")

    return fail


async def _attempts(ctx: Context, name: str, fn: Any, **options: Any) -> int:
    try:
        await ctx.step.run(name, fn, **options)
    except StepFailed as exc:
        return exc.attempts
    return 0


def test_a_workflows_step_retry_applies_to_its_steps_and_a_steps_own_policy_wins(
    app: App,
) -> None:
    calls: Counter[str] = Counter()

    @app.workflow(step_retry=FAST2)
    async def defaulted(ctx: Context, _: None) -> list[int]:
        return [
            await _attempts(ctx, "plain", _failing(calls, "plain")),
            await _attempts(ctx, "own", _failing(calls, "own"), retry=ONCE),
        ]

    with app.worker():
        assert app.run(defaulted, timeout=30) == [2, 1]
    assert calls == Counter({"plain": 2, "own": 1})


def test_the_apps_step_retry_is_the_default_and_a_workflows_own_wins(database: Any) -> None:
    app = App(database.url, schema=database.schema, sweep_interval=0, step_retry=FAST2)
    calls: Counter[str] = Counter()
    try:

        @app.workflow
        async def from_app(ctx: Context, _: None) -> int:
            return await _attempts(ctx, "a", _failing(calls, "a"))

        @app.workflow(step_retry=FAST4)
        async def from_workflow(ctx: Context, _: None) -> int:
            return await _attempts(ctx, "w", _failing(calls, "w"))

        with app.worker():
            assert app.run(from_app, timeout=30) == 2
            assert app.run(from_workflow, timeout=30) == 4
        assert calls == Counter({"a": 2, "w": 4})
    finally:
        app.close()


def test_a_bad_step_retry_is_refused(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/bad.db"
    with pytest.raises(ValidationError, match="step_retry"):
        App(url, step_retry=3)  # type: ignore[arg-type]
    app = App(url)
    with pytest.raises(ValidationError, match="step_retry"):

        @app.workflow(step_retry="3")  # type: ignore[call-overload, untyped-decorator]
        async def bad(ctx: Context, _: None) -> None:
            pass


def _flaky_rollback(calls: Counter[str], failures: int) -> Any:
    def undo(output: Any) -> None:
        calls["undo"] += 1
        if calls["undo"] <= failures:
            raise ConnectionError(f"undo {calls['undo']} failed")

    return undo


def test_a_rollback_retries_under_its_steps_policy(app: App) -> None:
    calls: Counter[str] = Counter()

    @app.workflow
    async def compensating(ctx: Context, _: None) -> None:
        await ctx.step.run("book", lambda: "booked", retry=FAST4,
                           rollback=_flaky_rollback(calls, 3))  # fmt: skip
        await ctx.step.run("pay", _failing(calls, "pay"), retry=ONCE)

    with app.worker():
        handle = app.start(compensating)
        with pytest.raises(WorkflowFailed) as failed:
            handle.result(timeout=30)
    # The step's policy allows 4 attempts; the default (3) would have given up.
    assert failed.value.error["compensated"] == ["book"]
    assert "compensation_failed" not in failed.value.error
    assert calls["undo"] == 4
    rollback = next(s for s in app.get_steps(handle.id) if s.name == "~rollback:book")
    assert (rollback.status, rollback.attempts) == ("completed", 4)


def test_a_rollback_retries_under_its_own_rollback_retry(app: App) -> None:
    calls: Counter[str] = Counter()

    @app.workflow(step_retry=FAST4)
    async def compensating(ctx: Context, _: None) -> None:
        await ctx.step.run("book", lambda: "booked", rollback=_flaky_rollback(calls, 1),
                           rollback_retry=ONCE)  # fmt: skip
        await ctx.step.run("pay", _failing(calls, "pay"), retry=ONCE)

    with app.worker():
        handle = app.start(compensating)
        with pytest.raises(WorkflowFailed) as failed:
            handle.result(timeout=30)
    assert failed.value.error["compensated"] == []
    assert failed.value.error["compensation_failed"] == ["book"]
    assert calls["undo"] == 1
    rollback = next(s for s in app.get_steps(handle.id) if s.name == "~rollback:book")
    assert (rollback.status, rollback.attempts) == ("failed", 1)


def fetch(n: int) -> int:
    return n * 10


def test_unnamed_steps_sleeps_and_child_runs_are_named_and_replay(app: App) -> None:
    calls: Counter[str] = Counter()

    def helper(label: str) -> str:
        calls[label] += 1
        return label.upper()

    @app.workflow(name="child-wf")
    async def child(ctx: Context, value: int | None) -> int:
        return (value or 0) + 1

    @app.workflow
    async def unnamed(ctx: Context, _: None) -> list[Any]:
        first = await ctx.step.run(fetch, 1)
        second = await ctx.step.run(fetch, n=2)
        shout = await ctx.step.run(helper, "hi")
        await ctx.step.sleep("10ms")  # parks: the next pass replays everything above
        await ctx.step.sleep(0.01)
        by_object = await ctx.step.run_workflow(child, 41)
        by_name = await ctx.step.run_workflow("child-wf")
        named = await ctx.step.run("named", helper, "ho")
        return [first, second, shout, by_object, by_name, named]

    with app.worker():
        handle = app.start(unnamed)
        assert handle.result(timeout=30) == [10, 20, "HI", 42, 1, "HO"]
    helper_name = f"{helper.__qualname__.split('.<locals>.')[0]}.helper"
    assert [s.name for s in app.get_steps(handle.id)] == [
        "fetch",
        "fetch:1",
        helper_name,
        "sleep",
        "sleep:1",
        "child-wf",
        "child-wf:1",
        "named",
    ]
    assert calls == Counter({"hi": 1, "ho": 1})  # replays returned the journaled values


def test_a_step_without_a_stable_name_is_refused_with_nothing_stored(app: App) -> None:
    @app.workflow
    async def nameless(ctx: Context, _: None) -> None:
        await ctx.step.run(lambda: 1)

    with app.worker():
        handle = app.start(nameless)
        with pytest.raises(WorkflowFailed) as failed:
            handle.result(timeout=30)
    assert failed.value.error["type"] == "ValidationError"
    assert "has no stable name" in failed.value.error["message"]
    assert app.get_steps(handle.id) == []


def test_the_name_of_an_unnamed_step() -> None:
    from perdure.names import step_name_of

    def outer() -> Any:
        def inner() -> None:
            pass

        return inner

    class Billing:
        def charge(self) -> None:
            pass

    assert step_name_of(fetch) == "fetch"
    assert step_name_of(outer()).endswith("outer.inner")
    assert step_name_of(Billing().charge).endswith("Billing.charge")
    nameless: object
    for nameless in (lambda: 1, functools.partial(fetch, 1), Counter(), "fetch"):
        with pytest.raises(ValidationError, match="name"):
            step_name_of(nameless)
