"""Contract: bounds on fan-out. A map step creates at most ``max_tasks`` tasks (its
own, else its flow's; 10,000 by default): a longer list fails the run with an error
naming the step and the count, before any task of that step is written. The same on
every backend, at a run's start and when a task's end makes the map ready."""

from __future__ import annotations

from typing import Any

from perdure.backends.base import Backend
from perdure.flows.definition import FlowShape, StepShape
from perdure.records import Complete, Transition

from .helpers import claim, js, new_run

BOUNDED = FlowShape(
    "bounded",
    steps=(
        StepShape("first"),
        StepShape("wide", (), "run", max_tasks=5),  # its own bound, above the flow's
        StepShape("fan", (), "run"),  # the flow's bound
        StepShape("last"),
    ),
    max_tasks=3,
)


async def _steps(backend: Backend, run_id: str) -> dict[str, Any]:
    return {s.name: s for s in await backend.get_steps(run_id)}


async def test_bounds_are_stored_with_the_shape(backend: Backend) -> None:
    await backend.register_flows([BOUNDED])
    stored = await backend.get_flow("bounded")
    assert stored == BOUNDED
    assert stored is not None and stored.max_tasks == 3
    assert [s.max_tasks for s in stored.steps] == [None, 5, None, None]
    default = FlowShape("plain", steps=(StepShape("each", (), "run"),))
    await backend.register_flows([default])
    assert (await backend.get_flow("plain")).max_tasks == 10_000  # type: ignore[union-attr]


async def test_a_map_over_more_than_max_tasks_fails_the_run_and_writes_none_of_its_tasks(
    backend: Backend,
) -> None:
    await backend.register_flows([BOUNDED])
    at_bound = await backend.start_flow(new_run("bounded", version=None, input=[1, 2, 3]))
    assert at_bound.run.status == "running"
    steps = await _steps(backend, at_bound.run.id)
    assert (len(steps["wide"].tasks), len(steps["fan"].tasks)) == (3, 3)

    over = await backend.start_flow(new_run("bounded", version=None, input=[1, 2, 3, 4]))
    run = over.run
    assert run.status == "failed" and run.error is not None
    assert run.error["step"] == "fan"
    assert run.error["message"].startswith(
        "map step 'fan' would create 4 tasks, over its max_tasks of 3"
    )
    assert "'bounded'" in run.error["message"]
    steps = await _steps(backend, run.id)
    # Steps start in definition order: those before fan started (their tasks are
    # cancelled with the run; wide's own bound of 5 lets it fan out), fan wrote no
    # task, and the step after it never started.
    assert {name: s.status for name, s in steps.items()} == {
        "first": "cancelled",
        "wide": "cancelled",
        "fan": "failed",
        "last": "created",
    }
    assert steps["fan"].tasks == () and steps["last"].tasks == ()
    assert [t.status for t in steps["wide"].tasks] == ["cancelled"] * 4
    assert steps["fan"].error["message"] == run.error["message"]


async def test_a_map_over_a_dependency_is_bounded_when_the_dependency_ends(
    backend: Backend,
) -> None:
    shape = FlowShape(
        "later", steps=(StepShape("source"), StepShape("each", ("source",), "source", max_tasks=2))
    )
    await backend.register_flows([shape])
    started = await backend.start_flow(new_run("later", version=None, input=None))
    (task,) = await claim(backend, workflows=[("later:source", 1)])
    (done,) = await backend.apply(
        [Transition(task.run.id, task.lease_token, outcome=Complete(js(["a", "b", "c"])))]
    )
    assert done.ok
    run = await backend.get_run(started.run.id)
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error["step"] == "each"
    assert "'each' would create 3 tasks, over its max_tasks of 2" in run.error["message"]
    steps = await _steps(backend, run.id)
    assert (steps["source"].status, steps["each"].status) == ("completed", "failed")
    assert steps["each"].tasks == ()
    assert await claim(backend, workflows=[("later:each", 1)]) == []


async def test_the_default_bound_is_ten_thousand(backend: Backend) -> None:
    shape = FlowShape("huge", steps=(StepShape("each", (), "run"),))
    await backend.register_flows([shape])
    over = await backend.start_flow(new_run("huge", version=None, input=list(range(10_001))))
    assert over.run.status == "failed" and over.run.error is not None
    assert "10001 tasks, over its max_tasks of 10000" in over.run.error["message"]
    assert (await _steps(backend, over.run.id))["each"].tasks == ()
