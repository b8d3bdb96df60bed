"""Bounds on fan-out from Python, on both backends: ``app.flow(max_tasks=...)`` bounds
every map step of the flow, ``@flow.map(max_tasks=...)`` one step; a map over a
longer list fails the run naming the step and the count, with none of its tasks."""

from __future__ import annotations

from typing import Any

import pytest

from perdure import App, ValidationError, WorkflowFailed
from perdure.flows.dsl import TaskContext


def test_the_bound_is_set_per_flow_and_per_step(app: App) -> None:
    flow = app.flow("bounded", base_delay=0, max_tasks=3)

    @flow.step
    async def pages(ctx: TaskContext, input: Any) -> list[int]:
        return list(range(input["run"]))

    @flow.map(over=pages, max_tasks=5)  # its own bound, above the flow's
    async def wide(ctx: TaskContext, item: int) -> int:
        return item

    @flow.map(over=pages)  # the flow's bound
    async def each(ctx: TaskContext, item: int) -> int:
        return item * 10

    with app.worker(poll_interval=0.05):
        assert app.run(flow, 3, timeout=30) == {"wide": [0, 1, 2], "each": [0, 10, 20]}
        handle = app.start(flow, 4)
        with pytest.raises(WorkflowFailed) as info:
            handle.result(timeout=30)
    error = info.value.error
    assert error["step"] == "each"
    assert error["message"].startswith(
        "map step 'each' would create 4 tasks, over its max_tasks of 3"
    )
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert (steps["each"].status, steps["each"].tasks) == ("failed", ())
    shape = app.get_flow("bounded")
    assert shape is not None and shape.max_tasks == 3
    assert [(s.name, s.max_tasks) for s in shape.steps] == [
        ("pages", None),
        ("wide", 5),
        ("each", None),
    ]


def test_a_start_over_the_default_bound_fails_at_once_with_no_task(app: App) -> None:
    flow = app.flow("fan")

    @flow.map(over="run")
    async def each(ctx: TaskContext, item: int) -> int:
        return item

    handle = app.start(flow, list(range(20_000)))  # no worker: decided by the start
    run = app.get_run(handle.id)
    assert run.status == "failed" and run.error is not None
    assert run.error["message"].startswith(
        "map step 'each' would create 20000 tasks, over its max_tasks of 10000"
    )
    (step,) = app.get_steps(handle.id)
    assert (step.status, step.tasks) == ("failed", ())


@pytest.mark.parametrize("bad", [0, -1, True, "10", 2.5, 2**31])
def test_a_bad_max_tasks_is_refused_and_nothing_is_stored(app: App, bad: Any) -> None:
    with pytest.raises(ValidationError, match="max_tasks of flow 'refused'"):
        app.flow("refused", max_tasks=bad)
    flow = app.flow("kept")

    @flow.step
    async def a(ctx: TaskContext, input: Any) -> None: ...

    with pytest.raises(ValidationError, match="max_tasks of step 'm'"):

        @flow.map(over="run", max_tasks=bad)
        async def m(ctx: TaskContext, item: Any) -> None: ...

    with pytest.raises(ValidationError, match="max_tasks of step 'x'"):
        flow.external_step("x", map_over=a, max_tasks=bad)
    with pytest.raises(ValidationError, match="for map steps only"):
        flow.external_step("single", depends_on=[a], max_tasks=5)
    assert [s.name for s in flow.shape.steps] == ["a"]
    app.start(flow)  # what is stored is the shape without the refused steps
    assert app.get_flow("refused") is None
    shape = app.get_flow("kept")
    assert shape is not None and [s.name for s in shape.steps] == ["a"]
