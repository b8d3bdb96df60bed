"""Random DAGs (up to 8 steps, random maps with random bounds, outputs and failures)
run through each backend, with the pure planner as the oracle: the same status, the
same output, every step's output, one task per map element, and nothing left live
after the end. A run that failed is then retried with the failures fixed (from a
random step, or from what did not complete): it ends as the planner says, and no step
that had completed runs again unless the retry's ``from_step`` reaches it."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perdure import App, NonRetriableError, WorkflowFailed
from perdure.flows.definition import FlowShape
from perdure.flows.dsl import TaskContext
from perdure.flows.planner import rerun, simulate

from .strategies import shapes

_names = itertools.count()


def _output(sizes: dict[str, Any], step: str, index: int) -> Any:
    size = sizes.get(step, 2)
    if isinstance(size, int):
        return [f"{step}.{index}.{j}" for j in range(size)]
    return {"step": step, "index": index}


def _define(
    app: App,
    shape: FlowShape,
    sizes: dict[str, Any],
    fail: set[tuple[str, int]],
    calls: list[str],
) -> str:
    name = f"rand{next(_names)}"
    flow = app.flow(name, max_attempts=1, base_delay=0, max_tasks=shape.max_tasks)
    for step in shape.steps:

        def handler(ctx: TaskContext, value: Any, step_name: str = step.name) -> Any:
            calls.append(step_name)
            if (step_name, ctx.task_index) in fail:
                raise NonRetriableError(f"{step_name}[{ctx.task_index}] fails")
            return _output(sizes, step_name, ctx.task_index)

        if step.map_over is None:
            flow.step(handler, name=step.name, depends_on=step.depends_on)
        else:
            flow.map(
                handler,
                name=step.name,
                over=step.map_over,
                depends_on=step.depends_on,
                max_tasks=step.max_tasks,
            )
    return name


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=shapes(max_steps=8, bounded=True),
    run_input=st.one_of(st.lists(st.integers(0, 9), max_size=3), st.just({"a": 1})),
    sizes=st.dictionaries(
        st.sampled_from([f"s{i}" for i in range(8)]),
        st.one_of(st.integers(min_value=0, max_value=3), st.just("obj")),
    ),
    fail=st.sets(st.tuples(st.sampled_from([f"s{i}" for i in range(8)]), st.integers(0, 2))),
    retry_from=st.one_of(st.none(), st.integers(0, 7)),
)
def test_random_flows_match_the_planner(
    app: App,
    shape: FlowShape,
    run_input: Any,
    sizes: dict[str, Any],
    fail: set[tuple[str, int]],
    retry_from: int | None,
) -> None:
    failing = set(fail)  # the handlers fail while their task is in it
    calls: list[str] = []
    name = _define(app, shape, sizes, failing, calls)
    oracle = simulate(shape, run_input, lambda s, i, _v: (True, _output(sizes, s, i)))
    # the run fails iff the failure-free run fails, or it starts a task that fails
    ran = {
        (s.name, i)
        for s in shape.steps
        if s.name in oracle.outputs
        for i in range(_count(s, run_input, oracle.outputs))
    }
    doomed = oracle.status == "failed" or bool(fail & ran)
    with app.worker(concurrency=8, poll_interval=0.05):
        handle = app.start(name, run_input)
        output, status = _outcome(handle)
        assert status == ("failed" if doomed else "completed"), (output, oracle)
        _check(app, handle.id, shape, oracle, output, status)
        if status == "failed":
            from_step = None
            if retry_from is not None and retry_from < len(shape.steps):
                from_step = shape.steps[retry_from].name
            _retry_fixed(app, handle, shape, oracle, from_step, failing, calls)


def _outcome(handle: Any) -> tuple[Any, str]:
    try:
        return handle.result(timeout=60), "completed"
    except WorkflowFailed as exc:
        return exc.error, "failed"


def _retry_fixed(
    app: App,
    handle: Any,
    shape: FlowShape,
    oracle: Any,
    from_step: str | None,
    failing: set[tuple[str, int]],
    calls: list[str],
) -> None:
    """The failures fixed, the run retried: it ends as the failure-free run would, and
    a step that had completed runs again only if ``from_step`` reaches it."""
    before = {s.name: s.status for s in app.get_steps(handle.id)}
    forced = rerun(shape, before, (), from_step).forced
    failing.clear()
    calls.clear()
    again = app.retry(handle.id, from_step=from_step)
    output, status = _outcome(again)
    assert status == oracle.status, (output, oracle, from_step)
    _check(app, handle.id, shape, oracle, output, status)
    kept = {name for name, status in before.items() if status == "completed"} - forced
    assert not kept.intersection(calls), (kept, calls, from_step)


def _check(app: App, run_id: str, shape: FlowShape, oracle: Any, output: Any, status: str) -> None:
    """The ended run's steps against the planner's outcome."""
    steps = {s.name: s for s in app.get_steps(run_id)}
    assert list(steps) == [s.name for s in shape.steps]
    for step in steps.values():  # nothing is left live once the run ended
        assert all(t.status in ("completed", "failed", "cancelled") for t in step.tasks)
        assert step.status != "started"
    if status == "completed":
        assert output == oracle.output
        for step_name, value in oracle.outputs.items():
            assert steps[step_name].output == value
            assert steps[step_name].status == "completed"
    else:
        failed = [s for s in steps.values() if s.status == "failed"]
        assert len(failed) == 1
        assert output["step"] == failed[0].name
        for step_name, step in steps.items():
            if step.status == "completed":
                assert step.output == oracle.outputs[step_name]


def _count(step: Any, run_input: Any, outputs: dict[str, Any]) -> int:
    if step.map_over is None:
        return 1
    source = run_input if step.map_over == "run" else outputs.get(step.map_over)
    return len(source) if isinstance(source, list) else 0
