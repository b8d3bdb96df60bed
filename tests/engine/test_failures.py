"""Retries, error types, rollbacks, child runs, deadlines, limits, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from perdure import (
    App,
    Context,
    NonRetriableError,
    RetryAfter,
    RetryPolicy,
    StepFailed,
    WorkflowCancelled,
    WorkflowFailed,
)
from perdure.testing import TestEnvironment

from .helpers import wait_for

FAST = RetryPolicy(max_attempts=3, initial="20ms", max="50ms", jitter=0)


def test_a_step_is_retried_after_backoff_and_its_attempts_are_visible(app: App) -> None:
    calls: Counter[str] = Counter()

    def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise ConnectionError(f"try {calls['flaky']}")
        return "ok"

    @app.workflow
    async def retrying(ctx: Context, _: None) -> str:
        await ctx.step.run("before", lambda: calls.update(["before"]))
        return await ctx.step.run("flaky", flaky, retry=FAST)

    with app.worker():
        handle = app.start(retrying)
        assert handle.result(timeout=20) == "ok"
    assert calls == Counter({"flaky": 3, "before": 1})
    step = next(s for s in app.get_steps(handle.id) if s.name == "flaky")
    assert (step.status, step.attempts) == ("completed", 3)
    retries = [e.data for e in app.get_events(handle.id) if e.type == "step_retrying"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert retries[0]["error"] == {"type": "ConnectionError", "message": "try 1"}


def test_exhausted_retries_raise_step_failed_which_the_body_may_catch(app: App) -> None:
    calls: Counter[str] = Counter()

    def broken() -> None:
        calls["broken"] += 1
        raise ValueError("nope")

    @app.workflow
    async def catching(ctx: Context, _: None) -> dict:
        try:
            await ctx.step.run("broken", broken, retry=FAST)
        except StepFailed as exc:
            return {"step": exc.step, "type": exc.error["type"], "attempts": exc.attempts}
        return {}

    with app.worker():
        handle = app.start(catching)
        assert handle.result(timeout=20) == {"step": "broken", "type": "ValueError", "attempts": 3}
    assert calls["broken"] == 3
    assert app.get_steps(handle.id)[0].status == "failed"


def test_uncaught_step_failure_fails_the_run_with_a_structured_error(app: App) -> None:
    @app.workflow
    async def failing(ctx: Context, _: None) -> None:
        await ctx.step.run("explode", lambda: 1 / 0, retry=RetryPolicy(max_attempts=1))

    with app.worker():
        handle = app.start(failing)
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=20)
    error = info.value.error
    assert error["type"] == "StepFailed" and error["step"] == "explode"
    assert "ZeroDivisionError" in error["message"] and "Traceback" in error["traceback"]
    assert handle.get().status == "failed"


def test_non_retriable_errors_and_retry_after(app: App, database) -> None:  # type: ignore[no-untyped-def]
    calls: Counter[str] = Counter()
    seen: list[float] = []

    def final() -> None:
        calls["final"] += 1
        raise NonRetriableError("card declined")

    def later() -> str:
        seen.append(time.monotonic())
        if len(seen) == 1:
            raise RetryAfter("6h")
        return "done"

    @app.workflow
    async def steering(ctx: Context, _: None) -> str:
        try:
            await ctx.step.run("final", final, retry=RetryPolicy(max_attempts=5))
        except StepFailed as exc:
            assert exc.attempts == 1  # noqa: PT017 - checked inside the workflow body
        return await ctx.step.run(
            "later", later, retry=RetryPolicy(max_attempts=2, initial="1h", max="1h")
        )

    with TestEnvironment(app, database.url) as env:
        handle = env.start(steering)
        env.advance("5h59m")  # past the policy's 1h backoff, short of RetryAfter's 6h
        assert handle.get().status == "waiting" and len(seen) == 1
        env.advance("1m")
        assert handle.result(timeout=20) == "done"
    assert calls["final"] == 1
    assert len(seen) == 2


def test_a_step_timeout_counts_as_a_failed_attempt(app: App) -> None:
    @app.workflow
    async def slow(ctx: Context, _: None) -> str:
        try:
            await ctx.step.run(
                "hang",
                lambda: asyncio.sleep(30),
                timeout="100ms",
                retry=RetryPolicy(max_attempts=1),
            )
        except StepFailed as exc:
            return exc.error["type"]
        return "no"

    with app.worker():
        assert app.run(slow, timeout=20) == "StepTimeout"


def test_workflow_retry_reruns_the_body_without_redoing_completed_steps(app: App) -> None:
    calls: Counter[str] = Counter()

    @app.workflow(retry=RetryPolicy(max_attempts=3, initial="20ms", jitter=0))
    async def body_retry(ctx: Context, _: None) -> int:
        await ctx.step.run("once", lambda: calls.update(["once"]))
        if ctx.attempt < 2:
            raise RuntimeError("transient body error")
        return ctx.attempt

    with app.worker():
        handle = app.start(body_retry)
        assert handle.result(timeout=20) == 2
    assert calls["once"] == 1
    assert handle.get().attempt == 2


def test_rollbacks_run_newest_first_with_each_steps_output(app: App) -> None:
    undone: list[object] = []

    @app.workflow
    async def saga(ctx: Context, _: None) -> None:
        await ctx.step.run(
            "reserve", lambda: {"seat": 12}, rollback=lambda out: undone.append(("reserve", out))
        )
        await ctx.step.run(
            "charge", lambda: 99, rollback=lambda out: undone.append(("charge", out))
        )
        await ctx.step.run("no-rollback", lambda: 1)
        await ctx.step.run("ship", lambda: 1 / 0, retry=RetryPolicy(max_attempts=1))

    with app.worker():
        handle = app.start(saga)
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=20)
    assert undone == [("charge", 99), ("reserve", {"seat": 12})]
    assert info.value.error["compensated"] == ["charge", "reserve"]
    kinds = [(s.name, s.kind) for s in app.get_steps(handle.id) if s.kind == "rollback"]
    assert kinds == [("~rollback:charge", "rollback"), ("~rollback:reserve", "rollback")]


def test_child_workflows(app: App) -> None:
    @app.workflow
    async def child(ctx: Context, n: int) -> int:
        if n < 0:
            raise NonRetriableError("negative")
        await ctx.step.sleep("think", "50ms")
        return await ctx.step.run("square", lambda: n * n)

    @app.workflow
    async def parent(ctx: Context, n: int) -> object:
        first = await ctx.step.run_workflow("child", child, n)
        try:
            await ctx.step.run_workflow("bad-child", child, -1)
        except StepFailed as exc:
            return [first, exc.error["type"]]
        return [first]

    with app.worker(concurrency=3):
        handle = app.start(parent, 4)
        assert handle.result(timeout=20) == [16, "NonRetriableError"]
    children = app.list_runs(child).items
    assert len(children) == 2 and all(c.parent_id == handle.id for c in children)


def test_cancelling_a_parent_cancels_its_children(app: App) -> None:
    @app.workflow
    async def sleepy_child(ctx: Context, _: None) -> None:
        await ctx.step.sleep("forever", "1h")

    @app.workflow
    async def parent_of_sleepy(ctx: Context, _: None) -> None:
        await ctx.step.run_workflow("child", sleepy_child)

    with app.worker():
        handle = app.start(parent_of_sleepy)
        kid = wait_for(lambda: app.list_runs(sleepy_child).items)[0]
        wait_for(lambda: app.get_run(kid.id).status == "waiting")
        assert handle.cancel() is True
    assert app.get_run(kid.id).status == "cancelled"
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=5)


def test_cancel_stops_the_current_step_and_commits_nothing_after(app: App) -> None:
    started = threading.Event()
    observed: list[str] = []

    async def cooperative() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            observed.append("cancelled")
            raise

    @app.workflow
    async def long_step(ctx: Context, _: None) -> None:
        await ctx.step.run("long", cooperative)
        await ctx.step.run("after", lambda: observed.append("after"))

    with app.worker():
        handle = app.start(long_step)
        assert started.wait(20)
        assert app.cancel(handle.id) is True
        wait_for(lambda: observed == ["cancelled"])
    assert handle.get().status == "cancelled"
    assert app.get_steps(handle.id) == []


def test_deadline_fails_a_parked_run(app: App, database) -> None:  # type: ignore[no-untyped-def]
    @app.workflow(deadline="1d")
    async def late(ctx: Context, _: None) -> None:
        await ctx.step.sleep("too-long", "7d")

    with TestEnvironment(app, database.url) as env:
        handle = env.start(late)
        env.advance("23h")
        assert handle.get().status == "waiting"
        env.advance("1h")
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=20)
    assert info.value.error["type"] == "DeadlineExceeded"


def test_step_attempt_limit(database) -> None:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, max_step_attempts=5)

    @app.workflow
    async def loop_forever(ctx: Context, _: None) -> None:
        for n in range(10):
            await ctx.step.run("s", lambda n=n: n)  # type: ignore[misc]

    try:
        with app.worker():
            handle = app.start(loop_forever)
            with pytest.raises(WorkflowFailed) as info:
                handle.result(timeout=20)
        assert info.value.error["type"] == "StepLimitExceeded"
        assert len(app.get_steps(handle.id)) == 5
    finally:
        app.close()


def test_a_worker_without_the_runs_version_leaves_it_waiting(database) -> None:  # type: ignore[no-untyped-def]
    old = App(database.url, schema=database.schema, sweep_interval=0)
    new = App(database.url, schema=database.schema, sweep_interval=0)

    @old.workflow(name="evolving", version=1)
    async def v1(ctx: Context, _: None) -> str:
        return "v1"

    @new.workflow(name="evolving", version=2)
    async def v2(ctx: Context, _: None) -> str:
        return await ctx.step.run("s", lambda: "v2")

    try:
        handle = new.start("evolving")
        worker = old.worker()
        worker.unavailable_grace = 0.1
        with worker:
            wait_for(lambda: handle.get().status == "waiting")
        run = handle.get()
        assert run.wake_reason == "version" and run.version == 2
        events = [e for e in new.get_events(handle.id) if e.type == "version_unavailable"]
        assert events and events[0].data["retry_in"] == 5
        assert new.get_steps(handle.id) == []
        with new.worker():
            assert handle.result(timeout=20) == "v2"  # waits out the backoff, never failed
    finally:
        old.close()
        new.close()


def test_heartbeats_keep_a_long_step_from_being_taken_over(database) -> None:  # type: ignore[no-untyped-def]
    executions: Counter[str] = Counter()
    apps = [App(database.url, schema=database.schema, sweep_interval=0) for _ in range(2)]

    def long_blocking_step() -> str:
        executions["long"] += 1
        time.sleep(1.5)  # three leases long, in a worker thread
        return "done"

    for each in apps:

        @each.workflow
        async def long_one(ctx: Context, _: None) -> str:
            return await ctx.step.run("long", long_blocking_step)

    try:
        with apps[0].worker(lease="500ms"), apps[1].worker(lease="500ms"):
            handle = apps[0].start("long_one")
            assert handle.result(timeout=30) == "done"
        assert executions["long"] == 1
        types = [e.type for e in apps[0].get_events(handle.id)]
        assert "lease_expired" not in types and types.count("claimed") == 1
    finally:
        for each in apps:
            each.close()


def test_deadline_fails_a_run_waiting_for_an_event(app: App, database) -> None:  # type: ignore[no-untyped-def]
    @app.workflow
    async def patient(ctx: Context, _: None) -> object:
        return await ctx.step.wait_for_event("never")

    with TestEnvironment(app, database.url) as env:
        handle = env.start(patient, deadline="3d")
        env.advance("3d")
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=20)
        assert env.signal(handle.id, "never") is False
    assert info.value.error["type"] == "DeadlineExceeded"
