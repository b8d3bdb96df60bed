"""Contract: retrying and forking an ended DAG-flow run (`retry_run` and `fork_run` of
a flow run), the same on every backend. A retry keeps the completed steps' outputs and
runs the others again, a step whose input is kept rerunning its unfinished tasks in
place (same ids), the rest getting new tasks; a fork starts a new run with the
completed steps copied."""

from __future__ import annotations

from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.errors import RunStateError, ValidationError
from perdure.flows.definition import FlowShape, StepShape

from .helpers import claim, js, new_run
from .test_flows import SHAPE, _claim_all, _complete, _fail

pytestmark = pytest.mark.timeout(60)


async def _failed_at_b(backend: Backend) -> tuple[str, dict[tuple[str, int], Any]]:
    """A diamond run (a -> each (map over a), b -> c) whose ``each[0]`` completed and
    whose ``b`` failed for good (so ``each[1]`` was cancelled); its claims before."""
    await backend.register_flows([SHAPE])
    run = (await backend.start_flow(new_run("diamond", version=None, input={"x": 1}))).run
    assert await _complete(backend, (await _claim_all(backend))[("a", 0)], ["p", "q"])
    tasks = await _claim_all(backend)
    assert await _complete(backend, tasks[("each", 0)], "e0")
    assert await _fail(backend, tasks[("b", 0)], "bug")
    ended = await backend.get_run(run.id)
    assert ended is not None and ended.status == "failed"
    return run.id, tasks


async def _statuses(backend: Backend, run_id: str) -> dict[str, tuple[str, list[str]]]:
    return {
        s.name: (s.status, [t.status for t in s.tasks]) for s in await backend.get_steps(run_id)
    }


async def test_a_retry_reruns_what_did_not_complete_and_keeps_the_rest(
    backend: Backend,
) -> None:
    run_id, before = await _failed_at_b(backend)
    again = await backend.retry_run(run_id, None, "ops")
    assert (again.id, again.status, again.attempt, again.error) == (run_id, "running", 2, None)
    assert await _statuses(backend, run_id) == {
        "a": ("completed", ["completed"]),
        "each": ("started", ["completed", "pending"]),  # its completed element is kept
        "b": ("started", ["pending"]),
        "c": ("created", []),
    }
    retried = [e for e in await backend.get_events(run_id) if e.type == "retried"]
    assert [e.data for e in retried] == [
        {"from_step": None, "steps": ["each", "b", "c"], "by": "ops", "attempt": 2}
    ]
    # A late result of the attempt before the retry is fenced out.
    assert not await _complete(backend, before[("each", 1)], "late")
    tasks = await _claim_all(backend)
    assert sorted(tasks) == [("b", 0), ("each", 1)]
    b = tasks[("b", 0)]
    assert b.run.id == before[("b", 0)].run.id and b.run.attempt == 1  # its id, attempts anew
    assert b.run.input == {"run": {"x": 1}, "a": ["p", "q"]}
    assert "retried" in [e.type for e in await backend.get_events(b.run.id)]
    assert await _complete(backend, tasks[("each", 1)], "e1")
    assert await _complete(backend, b, "bee")
    ((_, c),) = (await _claim_all(backend)).items()
    assert c.run.input == {"run": {"x": 1}, "each": ["e0", "e1"], "b": "bee"}
    assert await _complete(backend, c, "done")
    finished = await backend.get_run(run_id)
    assert finished is not None and (finished.status, finished.output) == (
        "completed",
        {"c": "done"},
    )


async def test_a_retry_from_a_step_reruns_it_and_everything_after_it(backend: Backend) -> None:
    run_id, _ = await _failed_at_b(backend)
    await backend.retry_run(run_id, "a", "ops")
    # a keeps its task (its input is the run's), the others wait for it to get new ones
    assert await _statuses(backend, run_id) == {
        "a": ("started", ["pending"]),
        "each": ("created", []),
        "b": ("created", []),
        "c": ("created", []),
    }
    assert await _complete(backend, (await _claim_all(backend))[("a", 0)], ["only"])
    tasks = await _claim_all(backend)
    assert sorted(tasks) == [("b", 0), ("each", 0)]  # the map has one element now
    assert tasks[("each", 0)].run.input == "only"
    for task in tasks.values():
        assert await _complete(backend, task, "ok")
    assert await _complete(backend, (await _claim_all(backend))[("c", 0)], "again")
    finished = await backend.get_run(run_id)
    assert finished is not None and finished.output == {"c": "again"}
    assert finished.attempt == 2


async def test_a_cancelled_flow_run_resumes_where_it_stopped(backend: Backend) -> None:
    await backend.register_flows([SHAPE])
    run = (await backend.start_flow(new_run("diamond", version=None))).run
    assert await _complete(backend, (await _claim_all(backend))[("a", 0)], [1])
    assert await backend.cancel_run(run.id)
    await backend.retry_run(run.id, None, "ops")
    tasks = await _claim_all(backend)
    assert sorted(tasks) == [("b", 0), ("each", 0)]
    for task in tasks.values():
        assert await _complete(backend, task, 1)
    assert await _complete(backend, (await _claim_all(backend))[("c", 0)], "resumed")
    finished = await backend.get_run(run.id)
    assert finished is not None and finished.output == {"c": "resumed"}


async def test_a_flow_retry_refuses_a_live_run_and_an_unknown_step(backend: Backend) -> None:
    await backend.register_flows([SHAPE])
    live = (await backend.start_flow(new_run("diamond", version=None))).run
    with pytest.raises(RunStateError, match="only a failed or cancelled run"):
        await backend.retry_run(live.id, None, "ops")
    run_id, _ = await _failed_at_b(backend)
    events = await backend.get_events(run_id)
    with pytest.raises(ValidationError, match="has no step 'nope'"):
        await backend.retry_run(run_id, "nope", "ops")
    unchanged = await backend.get_run(run_id)
    assert unchanged is not None and (unchanged.status, unchanged.attempt) == ("failed", 1)
    assert await backend.get_events(run_id) == events


async def test_a_retried_map_over_a_non_list_fails_again_with_the_same_error(
    backend: Backend,
) -> None:
    shape = FlowShape("maps", steps=(StepShape("m", (), "run"),))
    await backend.register_flows([shape])
    bad = (await backend.start_flow(new_run("maps", version=None, input={"k": 1}))).run
    again = await backend.retry_run(bad.id, None, "ops")
    assert (again.status, again.attempt) == ("failed", 2)
    assert again.error is not None and again.error == bad.error


# --------------------------------------------------------------------------- forks


async def _finish(backend: Backend, run_id: str) -> Any:
    """Complete every task of the live flow run until it ends (``a`` gives a list)."""
    while (run := await backend.get_run(run_id)) is not None and run.status == "running":
        for (step, index), task in (await _claim_all(backend)).items():
            assert await _complete(backend, task, ["x"] if step == "a" else f"{step}{index}")
    assert run is not None
    return run


async def test_a_fork_keeps_the_completed_steps_and_runs_the_rest(backend: Backend) -> None:
    run_id, _ = await _failed_at_b(backend)
    fork = await backend.fork_run(run_id, "fork-1", None, None, None, "ops")
    assert (fork.id, fork.workflow, fork.status, fork.input) == (
        "fork-1", "diamond", "running", {"x": 1},
    )  # fmt: skip
    # a completed in the source: kept, with its output and no task; the map over it
    # (not completed there) runs every element again
    assert await _statuses(backend, "fork-1") == {
        "a": ("completed", []),
        "each": ("started", ["pending", "pending"]),
        "b": ("started", ["pending"]),
        "c": ("created", []),
    }
    created = (await backend.get_events("fork-1"))[0]
    assert created.type == "created" and created.data is not None
    assert (created.data["forked_from"], created.data["by"]) == (run_id, "ops")
    assert "from_step" not in created.data
    finished = await _finish(backend, "fork-1")
    assert (finished.status, finished.output) == ("completed", {"c": "c0"})
    source = await backend.get_run(run_id)
    assert source is not None and source.status == "failed"  # untouched


async def test_a_fork_from_a_step_with_a_new_input_runs_it_and_what_follows(
    backend: Backend,
) -> None:
    run_id, _ = await _failed_at_b(backend)
    await backend.fork_run(run_id, "fork-2", "a", js({"x": 2}), None, "ops")
    tasks = await _claim_all(backend)
    assert list(tasks) == [("a", 0)] and tasks[("a", 0)].run.input == {"run": {"x": 2}}
    created = (await backend.get_events("fork-2"))[0]
    assert created.data is not None and created.data["from_step"] == "a"


async def test_a_fork_of_a_completed_run_completes_at_once(backend: Backend) -> None:
    await backend.register_flows([SHAPE])
    run = (await backend.start_flow(new_run("diamond", version=None))).run
    done = await _finish(backend, run.id)
    fork = await backend.fork_run(run.id, "fork-3", None, None, None, "ops")
    assert (fork.status, fork.output) == ("completed", done.output)


async def test_a_fork_into_another_version_keeps_the_steps_that_kept_their_shape(
    backend: Backend,
) -> None:
    await backend.register_flows([SHAPE])
    run = (await backend.start_flow(new_run("diamond", version=None))).run
    await _finish(backend, run.id)
    v2 = FlowShape(
        "diamond", 2, steps=(StepShape("a"), StepShape("b", ("a",)), StepShape("c", ("b",)))
    )
    await backend.register_flows([v2])
    fork = await backend.fork_run(run.id, "fork-4", None, None, 2, "ops")
    assert fork.version == 2
    assert await _statuses(backend, "fork-4") == {
        "a": ("completed", []),
        "b": ("completed", []),
        "c": ("started", ["pending"]),  # its dependencies changed: it runs
    }
    (task,) = await claim(backend, workflows=(("diamond:c", 2),))
    assert task.run.input == {"run": None, "b": "b0"}


async def test_a_fork_refuses_an_unknown_step_or_version(backend: Backend) -> None:
    run_id, _ = await _failed_at_b(backend)
    with pytest.raises(ValidationError, match="no step 'nope'"):
        await backend.fork_run(run_id, "fork-5", "nope", None, None, "ops")
    with pytest.raises(ValidationError, match="has no version 9"):
        await backend.fork_run(run_id, "fork-5", None, None, 9, "ops")
    assert await backend.get_run("fork-5") is None
