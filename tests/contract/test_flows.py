"""Contract: DAG flows (register_flows, get_flow, start_flow, and the task-end rule
that apply and cancel_run run), the same on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.errors import ValidationError
from perdure.flows.definition import FlowShape, StepShape
from perdure.records import Complete, Fail, ListRunsParams, Retry, Transition

from .helpers import claim, js, new_run

SHAPE = FlowShape(
    "diamond",
    steps=(
        StepShape("a"),
        StepShape("each", ("a",), "a"),
        StepShape("b", ("a",), max_attempts=5, timeout=9.5),
        StepShape("c", ("each", "b")),
    ),
)
PAIRS = tuple((f"diamond:{s.name}", 1) for s in SHAPE.steps)


async def _claim_all(backend: Backend) -> dict[tuple[str, int], Any]:
    claims = await claim(backend, workflows=PAIRS, limit=50)
    return {(c.run.parent_step or "", int(c.run.id.rsplit(":", 1)[1])): c for c in claims}


async def _complete(backend: Backend, task: Any, output: Any) -> bool:
    (result,) = await backend.apply(
        [Transition(task.run.id, task.lease_token, outcome=Complete(js(output)))]
    )
    return result.ok


async def _fail(backend: Backend, task: Any, message: str) -> bool:
    """Fail ``task`` for good."""
    (result,) = await backend.apply(
        [Transition(task.run.id, task.lease_token, outcome=Fail({"type": "E", "message": message}))]
    )
    return result.ok


async def test_shapes_are_stored_once_per_version(backend: Backend) -> None:
    assert await backend.get_flow("diamond") is None
    await backend.register_flows([SHAPE])
    await backend.register_flows([SHAPE])  # the same shape again: nothing changes
    assert await backend.get_flow("diamond") == SHAPE
    assert await backend.get_flow("diamond", 1) == SHAPE
    changed = FlowShape("diamond", steps=(*SHAPE.steps, StepShape("d", ("c",))))
    with pytest.raises(ValidationError, match="new version"):
        await backend.register_flows([changed])
    await backend.register_flows([FlowShape("diamond", 2, steps=changed.steps)])
    assert (await backend.get_flow("diamond")).version == 2  # type: ignore[union-attr]
    assert await backend.get_flow("diamond", 1) == SHAPE
    with pytest.raises(ValidationError, match="no flow"):
        await backend.start_flow(new_run("nope", version=None))


async def test_concurrent_starts_each_get_their_own_answer(backend: Backend) -> None:
    """Flow starts made at once (committed together where the backend batches them):
    each is created once with its own input, two with one idempotency key make one
    run, and a start of an unknown flow fails alone."""
    await backend.register_flows([SHAPE])
    news = [new_run("diamond", version=None, input={"n": n}) for n in range(8)]
    news += [new_run("diamond", version=None, input={"k": 1}, idempotency_key="once") for _ in "ab"]
    outcomes = await asyncio.gather(
        *(backend.start_flow(n) for n in news),
        backend.start_flow(new_run("nope", version=None)),
        return_exceptions=True,
    )
    *started, unknown = outcomes
    assert isinstance(unknown, ValidationError) and "no flow" in str(unknown)
    assert all(not isinstance(r, BaseException) for r in started), started
    results = [r for r in started if not isinstance(r, BaseException)]
    assert [r.run.input for r in results[:8]] == [{"n": n} for n in range(8)]
    assert all(r.created and r.run.status == "running" for r in results[:8])
    keyed = results[8:]
    assert keyed[0].run.id == keyed[1].run.id and sum(r.created for r in keyed) == 1
    tasks = await claim(backend, workflows=PAIRS, limit=50)
    assert sorted(t.run.parent_id or "" for t in tasks) == sorted(
        {r.run.id for r in results}
    )  # one first task per flow run


async def test_tasks_flow_through_the_one_claim_path(backend: Backend) -> None:
    await backend.register_flows([SHAPE])
    result = await backend.start_flow(new_run("diamond", version=None, input={"x": 1}))
    run = result.run
    assert result.created and (run.workflow, run.version, run.status) == ("diamond", 1, "running")
    again = await backend.start_flow(new_run("diamond", version=None, input={"x": 1}, id=run.id))
    assert not again.created and again.run.id == run.id

    tasks = await _claim_all(backend)
    assert list(tasks) == [("a", 0)]
    assert tasks[("a", 0)].run.input == {"run": {"x": 1}}
    assert await _complete(backend, tasks[("a", 0)], ["p", "q"])
    assert not await _complete(backend, tasks[("a", 0)], ["p", "q"])  # fenced: once

    tasks = await _claim_all(backend)
    assert sorted(tasks) == [("b", 0), ("each", 0), ("each", 1)]
    assert tasks[("each", 1)].run.input == "q"
    assert tasks[("b", 0)].run.input == {"run": {"x": 1}, "a": ["p", "q"]}
    # a retry keeps the step started; the next attempt has attempt 2
    b = tasks[("b", 0)]
    (retried,) = await backend.apply(
        [Transition(b.run.id, b.lease_token, outcome=Retry(b.now, {"type": "E"}))]
    )
    assert retried.ok
    for key in (("each", 1), ("each", 0)):  # out of order: the output keeps element order
        assert await _complete(backend, tasks[key], key[0] + str(key[1]))
    (b2,) = (await _claim_all(backend)).values()
    assert b2.run.attempt == 2
    assert await _complete(backend, b2, "bee")
    ((_, c),) = (await _claim_all(backend)).items()
    assert c.run.input == {"run": {"x": 1}, "each": ["each0", "each1"], "b": "bee"}
    assert await _complete(backend, c, {"done": True})

    finished = await backend.get_run(run.id)
    assert finished is not None and finished.status == "completed"
    assert finished.output == {"c": {"done": True}}
    steps = await backend.get_steps(run.id)
    assert [(s.name, s.status, s.attempts, len(s.tasks)) for s in steps] == [
        ("a", "completed", 1, 1),
        ("each", "completed", 2, 2),
        ("b", "completed", 2, 1),
        ("c", "completed", 1, 1),
    ]
    assert steps[1].output == ["each0", "each1"]


async def test_a_failed_task_fails_the_run_and_fences_the_others(backend: Backend) -> None:
    await backend.register_flows([SHAPE])
    run = (await backend.start_flow(new_run("diamond", version=None))).run
    tasks = await _claim_all(backend)
    await _complete(backend, tasks[("a", 0)], [1, 2])
    tasks = await _claim_all(backend)
    assert await _fail(backend, tasks[("b", 0)], "no")
    ended = await backend.get_run(run.id)
    assert ended is not None and ended.status == "failed"
    assert ended.error is not None and (ended.error["type"], ended.error["step"]) == (
        "StepFailed",
        "b",
    )
    assert not await _complete(backend, tasks[("each", 0)], "late")  # fenced out
    steps = {s.name: s for s in await backend.get_steps(run.id)}
    assert (steps["b"].status, steps["each"].status, steps["c"].status) == (
        "failed", "cancelled", "created",
    )  # fmt: skip
    assert [t.status for t in steps["each"].tasks] == ["cancelled", "cancelled"]
    assert steps["b"].tasks[0].status == "failed"  # the task that failed stays failed
    assert steps["each"].tasks[0].output is None


async def test_maps_over_an_empty_list_or_a_non_list(backend: Backend) -> None:
    shape = FlowShape("maps", steps=(StepShape("m", (), "run"), StepShape("n", ("m",), "m")))
    await backend.register_flows([shape])
    empty = await backend.start_flow(new_run("maps", version=None, input=[]))
    assert (empty.run.status, empty.run.output) == ("completed", {"n": []})
    bad = await backend.start_flow(new_run("maps", version=None, input={"k": 1}))
    assert bad.run.status == "failed" and bad.run.error is not None
    assert bad.run.error["step"] == "m" and "an object" in bad.run.error["message"]
    # a flow's tasks are listed under their run only
    listed = await backend.list_runs(ListRunsParams(limit=50))
    assert {r.id for r in listed.items} == {empty.run.id, bad.run.id}


async def test_a_map_over_a_non_list_stops_the_steps_defined_after_it(backend: Backend) -> None:
    # Ready steps start in definition order: the one before the failing map started
    # (and its task is cancelled with the run), the one after it never starts.
    shape = FlowShape(
        "ordered", steps=(StepShape("first"), StepShape("m", (), "run"), StepShape("last"))
    )
    await backend.register_flows([shape])
    bad = await backend.start_flow(new_run("ordered", version=None, input={"k": 1}))
    assert bad.run.status == "failed"
    steps = {s.name: s for s in await backend.get_steps(bad.run.id)}
    assert {name: s.status for name, s in steps.items()} == {
        "first": "cancelled",
        "m": "failed",
        "last": "created",
    }
    assert [t.status for t in steps["first"].tasks] == ["cancelled"]
    assert steps["last"].tasks == ()
