"""Recovering runs (DESIGN §4): retry from the failed step or an earlier one, retry of
a cancelled run and of a parent with children, fork, and bulk retry — on each backend,
with execution counts showing what runs again."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from perdure import App, Context, RetryPolicy, RunStateError, ValidationError, WorkflowFailed

from .helpers import wait_for

ONCE = RetryPolicy(max_attempts=1)


class Calls:
    """Counts step executions across passes (thread-safe: sync steps run in a pool)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.broken: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        with self._lock:
            self.count[name] += 1
        if name in self.broken:
            raise RuntimeError(f"{name} is broken")
        return f"{name}-{self.count[name]}"


def _pipeline(app: App, calls: Calls) -> Callable[..., Any]:
    @app.workflow
    async def pipeline(ctx: Context, _: None) -> list[str]:
        a = await ctx.step.run("a", calls, "a", retry=ONCE)
        b = await ctx.step.run("b", calls, "b", retry=ONCE)
        c = await ctx.step.run("c", calls, "c", retry=ONCE)
        return [a, b, c]

    return pipeline


def test_retry_resumes_from_the_failed_step_without_rerunning_earlier_ones(app: App) -> None:
    calls = Calls()
    calls.broken = {"b"}
    pipeline = _pipeline(app, calls)
    with app.worker():
        handle = app.start(pipeline)
        with pytest.raises(WorkflowFailed):
            handle.result(timeout=30)
        calls.broken = set()  # "the fix is deployed"
        again = app.retry(handle.id, by="ops@example")
        assert again.id == handle.id
        assert handle.result(timeout=30) == ["a-1", "b-2", "c-1"]
    assert calls.count == Counter({"a": 1, "b": 2, "c": 1})
    run = app.get_run(handle.id)
    assert (run.status, run.attempt, run.error) == ("completed", 2, None)
    [retried] = [e for e in app.get_events(handle.id) if e.type == "retried"]
    assert retried.data == {
        "from_step": None, "superseded": ["b"], "by": "ops@example", "attempt": 2
    }  # fmt: skip
    history = app.get_steps(handle.id, include_superseded=True)
    assert [(s.name, s.status, s.superseded) for s in history] == [
        ("a", "completed", False),
        ("b", "failed", True),
        ("b", "completed", False),
        ("c", "completed", False),
    ]
    assert [s.name for s in app.get_steps(handle.id)] == ["a", "b", "c"]


def test_retry_from_an_earlier_step_reruns_it_and_what_follows(app: App) -> None:
    calls = Calls()
    calls.broken = {"c"}
    pipeline = _pipeline(app, calls)
    with app.worker():
        handle = app.start(pipeline)
        with pytest.raises(WorkflowFailed):
            handle.result(timeout=30)
        calls.broken = set()
        app.retry(handle.id, from_step="b")
        assert handle.result(timeout=30) == ["a-1", "b-2", "c-2"]
    assert calls.count == Counter({"a": 1, "b": 2, "c": 2})


def test_a_live_run_or_an_unknown_step_cannot_be_retried(app: App) -> None:
    calls = Calls()
    calls.broken = {"a"}
    pipeline = _pipeline(app, calls)
    handle = app.start(pipeline)  # pending: no worker
    with pytest.raises(RunStateError, match="is pending: only a failed or cancelled run"):
        app.retry(handle.id)
    with app.worker(), pytest.raises(WorkflowFailed):
        handle.result(timeout=30)
    with pytest.raises(ValidationError, match="has no step 'nope'"):
        app.retry(handle.id, from_step="nope")
    assert app.get_run(handle.id).status == "failed"  # nothing changed


def test_a_cancelled_run_resumes_where_it_was(app: App) -> None:
    calls = Calls()

    @app.workflow
    async def gated(ctx: Context, _: None) -> str:
        first = await ctx.step.run("first", calls, "first")
        gate = await ctx.step.wait_for_event("gate")
        return f"{first} {gate}"

    with app.worker():
        handle = app.start(gated)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 20)
        assert app.cancel(handle.id)
        app.retry(handle.id)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 20)
        handle.signal("gate", "open")
        assert handle.result(timeout=30) == "first-1 open"
    assert calls.count == Counter({"first": 1})


def test_retrying_a_parent_reuses_a_completed_child_and_retries_a_cancelled_one(
    app: App,
) -> None:
    calls = Calls()

    @app.workflow
    async def leaf(ctx: Context, name: str) -> str:
        await ctx.step.wait_for_event("go") if name == "slow" else None
        return await ctx.step.run("work", calls, name)

    @app.workflow
    async def parent(ctx: Context, _: None) -> list[str]:
        quick = await ctx.step.run_workflow("quick", leaf, "quick")
        slow = await ctx.step.run_workflow("slow", leaf, "slow")
        return [quick, slow]

    with app.worker():
        handle = app.start(parent)
        children = wait_for(lambda: app.list_runs(parent_id=handle.id).items[1:] and
                            app.list_runs(parent_id=handle.id).items, 20)  # fmt: skip
        slow = next(c for c in children if c.input == "slow")
        wait_for(lambda: app.get_run(slow.id).status == "waiting", 20)
        app.cancel(handle.id)  # the live child is cancelled with it
        assert app.get_run(slow.id).status == "cancelled"
        app.retry(handle.id)
        wait_for(lambda: app.get_run(slow.id).status == "waiting", 20)
        app.signal(slow.id, "go")
        assert handle.result(timeout=30) == ["quick-1", "slow-1"]
    assert len(app.list_runs(parent_id=handle.id).items) == 2  # no duplicate child
    assert calls.count == Counter({"quick": 1, "slow": 1})


def test_fork_copies_the_journal_before_a_step_and_leaves_the_source(app: App) -> None:
    calls = Calls()
    pipeline = _pipeline(app, calls)
    with app.worker():
        source = app.start(pipeline)
        assert source.result(timeout=30) == ["a-1", "b-1", "c-1"]
        fork = app.fork(source.id, from_step="b", by="ops@example")
        assert fork.id != source.id
        assert fork.result(timeout=30) == ["a-1", "b-2", "c-2"]
        whole = app.fork(source.id)  # the whole journal: nothing runs again
        assert whole.result(timeout=30) == ["a-1", "b-1", "c-1"]
    assert calls.count == Counter({"a": 1, "b": 2, "c": 2})
    assert [s.name for s in app.get_steps(source.id)] == ["a", "b", "c"]
    assert app.get_run(source.id).output == ["a-1", "b-1", "c-1"]
    [created] = [e for e in app.get_events(fork.id) if e.type == "created"]
    assert created.data["forked_from"] == source.id and created.data["from_step"] == "b"
    with pytest.raises(ValidationError, match="has no step"):
        app.fork(source.id, from_step="zzz")


def test_bulk_retry_resumes_every_failed_run_the_filters_select(app: App) -> None:
    calls = Calls()
    calls.broken = {"b"}
    pipeline = _pipeline(app, calls)
    with app.worker(concurrency=20):
        handles = [app.start(pipeline, None) for _ in range(50)]
        for handle in handles:
            with pytest.raises(WorkflowFailed):
                handle.result(timeout=60)
        calls.broken = set()
        retried = app.retry_runs(pipeline)
        assert sorted(retried) == sorted(h.id for h in handles)
        for handle in handles:
            a, b, c = handle.result(timeout=60)
            assert a.startswith("a-") and b.startswith("b-") and c.startswith("c-")
    assert calls.count["a"] == 50 and calls.count["b"] == 100 and calls.count["c"] == 50
    assert app.retry_runs(pipeline) == []  # none failed any more


def test_bulk_cancel_without_any_filter_is_refused(app: App) -> None:
    calls = Calls()
    pipeline = _pipeline(app, calls)
    handle = app.start(pipeline)
    with pytest.raises(ValidationError, match="cancel_runs needs a filter"):
        app.cancel_runs()
    assert app.get_run(handle.id).status == "pending"  # nothing was cancelled
    assert app.cancel_runs(pipeline) == [handle.id]


def test_bulk_actions_refuse_a_status_they_cannot_take(app: App) -> None:
    pipeline = _pipeline(app, Calls())
    handle = app.start(pipeline)
    for status in ("running", "pending", "completed"):
        with pytest.raises(ValidationError, match="one of failed, cancelled"):
            app.retry_runs(pipeline, status=status)
    for status in ("completed", "failed", "cancelled"):
        with pytest.raises(ValidationError, match="one of pending, running, waiting"):
            app.cancel_runs(pipeline, status=status)
    assert app.get_run(handle.id).status == "pending"  # nothing was cancelled
    assert [e.type for e in app.get_events(handle.id)] == ["created"]
    assert app.cancel_runs(pipeline, status="pending") == [handle.id]
    assert app.retry_runs(pipeline, status="cancelled") == [handle.id]
