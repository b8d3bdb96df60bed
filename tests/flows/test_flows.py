"""DAG flows end to end (DESIGN §6) on both backends: the seed's analyze_website,
several roots, root-only flows, maps, every failure path, versions, reading steps."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from perdure import App, ValidationError, WorkflowCancelled, WorkflowFailed
from perdure.flows.dsl import TaskContext

from ..engine.helpers import wait_for


def _analyze(app: App) -> Any:
    analyze = app.flow("analyze_website", max_attempts=3, base_delay=0, timeout=10)

    @analyze.step
    async def website(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        return {"content": f"<html>{input['run']['url']}</html>", "links": ["a", "b", "c"]}

    @analyze.step(depends_on=[website], max_attempts=5, timeout=30)
    async def sentiment(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        assert set(input) == {"run", "website"}
        return {"score": 0.8}

    @analyze.step(depends_on=["website"])
    def summary(ctx: TaskContext, input: dict[str, Any]) -> str:  # a sync handler
        return "summary of " + input["website"]["content"]

    @analyze.step(depends_on=[website])
    async def links(ctx: TaskContext, input: dict[str, Any]) -> list[str]:
        return list(input["website"]["links"])

    @analyze.map(over=links, name="pages")
    async def pages(ctx: TaskContext, item: Any) -> str:
        return f"page {item}"

    @analyze.step(depends_on=[sentiment, summary, "pages"])
    async def save(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        assert set(input) == {"run", "sentiment", "summary", "pages"}
        return {"saved": True, "score": input["sentiment"]["score"], "pages": input["pages"]}

    return analyze


def test_the_seed_example_runs_end_to_end(app: App) -> None:
    analyze = _analyze(app)
    with app.worker(concurrency=4):
        handle = app.start(analyze, {"url": "https://example.com"})
        output = handle.result(timeout=30)
    assert output == {
        "save": {"saved": True, "score": 0.8, "pages": ["page a", "page b", "page c"]}
    }
    run = app.get_run(handle.id)
    assert (run.workflow, run.version, run.status) == ("analyze_website", 1, "completed")
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert list(steps) == ["website", "sentiment", "summary", "links", "pages", "save"]
    assert all(s.status == "completed" for s in steps.values())
    assert steps["pages"].output == ["page a", "page b", "page c"]
    assert [t.index for t in steps["pages"].tasks] == [0, 1, 2]
    assert steps["summary"].output == "summary of <html>https://example.com</html>"
    assert all(s.attempts == len(s.tasks) for s in steps.values())
    # listed like a workflow run, tasks are not
    assert [r.id for r in app.list_runs(workflow="analyze_website").items] == [handle.id]
    assert [r.id for r in app.list_runs().items] == [handle.id]
    (summary,) = app.list_workflows()
    assert (summary.name, summary.counts["completed"]) == ("analyze_website", 1)


def test_several_roots_and_root_only_flows(app: App) -> None:
    flow = app.flow("roots")

    @flow.step
    async def a(ctx: TaskContext, input: Any) -> int:
        return len(input["run"]) if isinstance(input["run"], list) else 0

    @flow.step
    async def b(ctx: TaskContext, input: Any) -> int:
        return 2

    @flow.map(over="run")
    async def each(ctx: TaskContext, item: int) -> int:
        return item

    with app.worker():
        with pytest.raises(WorkflowFailed) as info:
            app.run(flow, 5, timeout=30)  # "each" maps over the run: 5 is no list
        assert info.value.error["step"] == "each"
        assert "'each'" in info.value.error["message"]
        assert app.run(flow, [1, 2], timeout=30) == {"a": 2, "b": 2, "each": [1, 2]}

    flow2 = app.flow("roots2")

    @flow2.step
    async def x(ctx: TaskContext, input: Any) -> str:
        return "x"

    @flow2.step
    async def y(ctx: TaskContext, input: Any) -> str:
        return "y"

    with app.worker():
        assert app.run(flow2, None, timeout=30) == {"x": "x", "y": "y"}


def test_an_empty_map_completes_at_once(app: App) -> None:
    flow = app.flow("empty")

    @flow.map(over="run")
    async def each(ctx: TaskContext, item: int) -> int:
        raise AssertionError("no element, no task")

    @flow.step(depends_on=[each])
    async def after(ctx: TaskContext, input: Any) -> Any:
        return input["each"]

    handle = app.start(flow, [])
    # with no worker at all, the map is complete: only "after" has a task
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert (steps["each"].status, steps["each"].output, steps["each"].tasks) == (
        "completed",
        [],
        (),
    )
    with app.worker():
        assert handle.result(timeout=30) == {"after": []}


def test_a_map_of_a_thousand_elements(app: App) -> None:
    flow = app.flow("big", base_delay=0)

    @flow.map(over="run")
    async def double(ctx: TaskContext, item: int) -> int:
        return item * 2

    @flow.step(depends_on=[double])
    async def total(ctx: TaskContext, input: Any) -> int:
        return sum(input["double"])

    with app.worker(concurrency=50):
        assert app.run(flow, list(range(1000)), timeout=120) == {"total": 999 * 1000}


def test_retries_use_the_backoff_and_then_fail_the_run(app: App) -> None:
    flow = app.flow("flaky", max_attempts=3, base_delay=0)
    attempts: list[int] = []

    @flow.step
    async def once(ctx: TaskContext, input: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError("not yet")
        return "ok"

    @flow.step(max_attempts=2)
    async def never(ctx: TaskContext, input: Any) -> str:
        raise RuntimeError("always")

    @flow.step(depends_on=[once, never])
    async def last(ctx: TaskContext, input: Any) -> str:
        raise AssertionError("never runs")

    with app.worker():
        handle = app.start(flow)
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=30)
    error = info.value.error
    assert (error["type"], error["step"]) == ("StepFailed", "never")
    assert error["cause"]["message"] == "always"
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert steps["never"].status == "failed"
    assert steps["never"].attempts == 2
    assert steps["last"].status == "created"


def test_a_timeout_is_retried(app: App) -> None:
    flow = app.flow("slow", base_delay=0, timeout=0.2)

    @flow.step
    async def step(ctx: TaskContext, input: Any) -> int:
        if ctx.attempt == 1:
            await asyncio.sleep(30)  # cancelled by the timeout
        return ctx.attempt

    with app.worker():
        assert app.run(flow, timeout=30) == {"step": 2}
    (state,) = app.get_steps(app.list_runs(workflow="slow").items[0].id)
    assert [t.attempts for t in state.tasks] == [2]


def test_a_failing_task_cancels_the_others_and_fences_their_results(app: App) -> None:
    flow = app.flow("fence", max_attempts=1)
    started = threading.Event()
    finish = threading.Event()

    @flow.step
    def slow(ctx: TaskContext, input: Any) -> str:
        started.set()
        finish.wait(30)
        return "late"

    @flow.step
    async def bad(ctx: TaskContext, input: Any) -> str:
        await asyncio.to_thread(started.wait, 30)  # "slow" is running
        raise RuntimeError("boom")

    with app.worker(concurrency=2):
        handle = app.start(flow)
        with pytest.raises(WorkflowFailed):
            handle.result(timeout=30)
        finish.set()
        steps = {s.name: s for s in app.get_steps(handle.id)}
        assert steps["slow"].status == "cancelled"
        wait_for(lambda: not app.list_runs(status="running").items)
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert steps["slow"].tasks[0].status == "cancelled"
    assert steps["slow"].tasks[0].output is None  # the late result was fenced out
    assert app.get_run(handle.id).status == "failed"


def test_cancelling_a_flow_run_cancels_its_tasks(app: App) -> None:
    flow = app.flow("cancel_me")

    @flow.step
    async def only(ctx: TaskContext, input: Any) -> None:
        return None

    handle = app.start(flow)  # no worker: the task stays pending
    assert app.cancel(handle.id)
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=10)
    (step,) = app.get_steps(handle.id)
    assert step.tasks[0].status == "cancelled"


def test_definition_errors_store_nothing(app: App) -> None:
    flow = app.flow("bad")

    @flow.step
    async def a(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ValidationError, match="twice"):

        @flow.step(name="a")
        async def again(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ValidationError, match="unknown step 'zz'"):

        @flow.step(depends_on=["zz"])
        async def b(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ValidationError, match="itself"):

        @flow.step(depends_on=["c"])
        async def c(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ValidationError, match="unknown step 'nope'"):

        @flow.map(over="nope")
        async def m(ctx: TaskContext, item: Any) -> None: ...

    with pytest.raises(ValidationError, match="max_attempts"):
        flow.external_step("n", max_attempts=0)
    assert [s.name for s in flow.shape.steps] == ["a"]
    for options in ({"delay": "1s"}, {"deadline": "1h"}):
        with pytest.raises(ValidationError, match="DAG flow"):
            app.start(flow, **options)  # type: ignore[arg-type]
    assert app.list_runs(workflow="bad").items == []
    app.start(flow)  # what is stored is the shape without the refused steps
    shape = app.get_flow("bad")
    assert shape is not None and [s.name for s in shape.steps] == ["a"]


def test_a_changed_shape_needs_a_new_version(database) -> None:  # type: ignore[no-untyped-def]
    first = App(database.url, schema=database.schema, sweep_interval=0)
    flow = first.flow("versioned")

    @flow.step
    async def a(ctx: TaskContext, input: Any) -> str:
        return "v1"

    handle = first.start(flow)
    first.close()

    second = App(database.url, schema=database.schema, sweep_interval=0)
    changed = second.flow("versioned")

    @changed.step
    async def b(ctx: TaskContext, input: Any) -> str:
        return "b"

    with pytest.raises(ValidationError, match="new version"):
        second.start(changed)
    second.close()

    third = App(database.url, schema=database.schema, sweep_interval=0)
    v1 = third.flow("versioned")

    @v1.step(name="a")
    async def a1(ctx: TaskContext, input: Any) -> str:
        return "v1"

    v2 = third.flow("versioned", version=2)

    @v2.step(name="b")
    async def b2(ctx: TaskContext, input: Any) -> str:
        return "v2"

    with third.worker():
        assert third.result(handle.id, timeout=30) == {"a": "v1"}  # keeps its shape
        assert third.run("versioned", timeout=30) == {"b": "v2"}  # new runs: highest
    third.close()


def test_a_failed_flow_run_is_retried_after_the_fix_and_forked(app: App) -> None:
    """The operator's path: a step fails on a bug, the fix is deployed, ``retry``
    resumes the run under its id; the step that completed does not run again."""
    flow = app.flow("fixed_later", max_attempts=1)
    calls: list[str] = []
    fixed = threading.Event()

    @flow.step
    async def fetch(ctx: TaskContext, input: Any) -> int:
        calls.append("fetch")
        return 20

    @flow.step(depends_on=[fetch])
    async def use(ctx: TaskContext, input: Any) -> int:
        calls.append("use")
        if not fixed.is_set():
            raise RuntimeError("bug")
        return int(input["fetch"]) + 1

    with app.worker():
        handle = app.start(flow)
        with pytest.raises(WorkflowFailed):
            handle.result(timeout=30)
        fixed.set()  # the fix is deployed
        again = app.retry(handle.id, by="ops")
        assert again.id == handle.id
        assert again.result(timeout=30) == {"use": 21}
        assert calls == ["fetch", "use", "use"]
        assert app.get_run(handle.id).attempt == 2
        fork = app.fork(handle.id, from_step="use", by="ops")  # fetch is kept
        assert fork.id != handle.id and fork.result(timeout=30) == {"use": 21}
    assert calls == ["fetch", "use", "use", "use"]
    assert app.get_events(fork.id)[0].data["forked_from"] == handle.id
    step = app.get_steps(handle.id)[1]
    with pytest.raises(ValidationError, match="a task of a DAG flow"):
        app.retry(step.tasks[0].run_id)
