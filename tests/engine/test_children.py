"""Children (DESIGN §4): a child only another process registers, a child ends with its
parent, and run_workflow's timeout leaves the child running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from perdure import App, ChildTimeout, Context, StepFailed, WorkflowFailed
from perdure.testing import TestEnvironment

from .helpers import wait_for


@pytest.fixture
def other(database) -> Iterator[App]:  # type: ignore[no-untyped-def]
    """A second process's App on the same database, with workflows of its own."""
    app = App(database.url, schema=database.schema, sweep_interval=0)
    yield app
    app.close()


def test_run_workflow_accepts_a_child_only_another_process_registers(app: App, other: App) -> None:
    @app.workflow
    async def parent(ctx: Context, n: int) -> int:
        return await ctx.step.run_workflow("child", "billing.double", n) + 1

    @other.workflow(name="billing.double", version=3)
    async def double(ctx: Context, n: int) -> int:
        return n * 2

    with app.worker(workflows=["parent"]):
        handle = app.start(parent, 20)
        child = wait_for(lambda: app.list_runs(parent_id=handle.id).items)[0]
        assert (child.workflow, child.version, child.status) == ("billing.double", None, "pending")
        with other.worker(workflows=["billing.*"]):
            assert handle.result(timeout=30) == 41
    assert app.get_run(child.id).version == 3


def test_a_failing_parent_cancels_its_live_children(app: App) -> None:
    @app.workflow
    async def waiter(ctx: Context, _: object) -> object:
        return await ctx.step.wait_for_event("never")

    @app.workflow
    async def parent(ctx: Context, _: object) -> None:
        await ctx.step.run_workflow("child", waiter, None, timeout="1s")

    with app.worker():
        handle = app.start(parent)
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=30)
    # The child's wait timed out (ChildTimeout), the parent failed, and the child that
    # the timeout left running ended with its parent, in the same transaction.
    assert info.value.error["type"] == "StepFailed"
    (child,) = app.list_runs(parent_id=handle.id).items
    assert child.status == "cancelled"
    cancelled = [e for e in app.get_events(child.id) if e.type == "cancelled"]
    assert cancelled[0].data == {"by": handle.id}


def test_run_workflow_timeout_fails_the_step_with_child_timeout_and_the_child_goes_on(
    app: App,
) -> None:
    @app.workflow
    async def slow(ctx: Context, _: object) -> str:
        return await ctx.step.wait_for_event("finish")

    @app.workflow
    async def parent(ctx: Context, _: object) -> str:
        try:
            await ctx.step.run_workflow("child", slow, None, timeout="1s")
        except StepFailed as exc:
            return str(exc.error["type"])
        return "no timeout"

    with app.worker():
        handle = app.start(parent)
        assert handle.result(timeout=30) == ChildTimeout.__name__
        (child,) = app.list_runs(parent_id=handle.id).items
        assert app.get_run(child.id).status in ("pending", "waiting", "running")
        assert app.signal(child.id, "finish", "done")
        assert app.result(child.id, timeout=30) == "done"
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert steps["child"].status == "failed"
    assert steps["child"].error is not None and steps["child"].error["type"] == "ChildTimeout"


def test_a_cancelled_parent_cancels_its_children_and_grandchildren(app: App) -> None:
    @app.workflow
    async def leaf(ctx: Context, _: object) -> object:
        return await ctx.step.wait_for_event("never")

    @app.workflow
    async def middle(ctx: Context, _: object) -> object:
        return await ctx.step.run_workflow("leaf", leaf, None)

    @app.workflow
    async def top(ctx: Context, _: object) -> object:
        return await ctx.step.run_workflow("middle", middle, None)

    with app.worker():
        handle = app.start(top)
        mid = wait_for(lambda: app.list_runs(parent_id=handle.id).items)[0]
        low = wait_for(lambda: app.list_runs(parent_id=mid.id).items)[0]
        assert app.cancel(handle.id) is True
    assert [app.get_run(r).status for r in (handle.id, mid.id, low.id)] == ["cancelled"] * 3


def test_a_parent_past_its_deadline_cancels_its_live_children(app: App, database) -> None:  # type: ignore[no-untyped-def]
    @app.workflow
    async def waiter(ctx: Context, _: object) -> object:
        return await ctx.step.wait_for_event("never")

    @app.workflow(deadline="1d")
    async def parent(ctx: Context, _: object) -> None:
        await ctx.step.run_workflow("child", waiter, None)

    with TestEnvironment(app, database.url) as env:
        handle = env.start(parent)
        env.advance("1d")
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=30)
        (child,) = env.list_runs(parent_id=handle.id).items
    assert info.value.error["type"] == "DeadlineExceeded"
    assert child.status == "cancelled"
