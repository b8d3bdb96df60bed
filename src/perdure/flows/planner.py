"""What happens next in a flow run (pure: no I/O, no clock).

Given a shape, the run's input, the outputs of its completed steps and the steps that
have tasks already, `advance` says which steps become ready and what their tasks are
(a map step: one task per element), which map steps complete at once (an empty list
gives ``[]``), which step fails the run (a map over a non-list, or over a list longer
than the step's ``max_tasks``), and the run's output once every step completed
(``{leaf step: output}``).

The SQLite backend applies these decisions in the transaction that ends a task; the
PostgreSQL functions (``flow_advance``) implement the same rules in plpgsql, and the
property tests run random flows through both backends with this module as the
oracle (`simulate`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .definition import RUN, FlowShape, StepShape

__all__ = [
    "Advance",
    "NewTask",
    "Outcome",
    "Rerun",
    "advance",
    "fanout_error",
    "fork_copies",
    "map_error",
    "rerun",
    "retry_delay",
    "simulate",
    "step_input",
    "step_output",
]


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to insert: ``input`` is what its handler receives."""

    step: str
    index: int
    input: Any


@dataclass(frozen=True, slots=True)
class Advance:
    """The decisions of one `advance`."""

    #: tasks of the steps that became ready, in definition order then index
    tasks: tuple[NewTask, ...] = ()
    #: steps that got tasks (each now ``started``)
    started: tuple[str, ...] = ()
    #: steps completed at once (maps over an empty list), with their outputs
    completed: Mapping[str, Any] = field(default_factory=dict)
    #: (step, message): the run fails (a map over a non-list, or over too long a list)
    failure: tuple[str, str] | None = None
    #: the run's output, once every step completed
    output: dict[str, Any] | None = None


def step_input(step: StepShape, run_input: Any, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """A single step's input: ``{"run": run input, <dependency>: its output, ...}``."""
    value: dict[str, Any] = {RUN: run_input}
    for dep in step.depends_on:
        value[dep] = outputs[dep]
    return value


def map_error(flow: str, step: StepShape, source: Any) -> str | None:
    """Why a map step cannot fan out over ``source`` (None: it is a list)."""
    if isinstance(source, list):
        return None
    what = "the run's input" if step.map_over == RUN else f"the output of step {step.map_over!r}"
    return (
        f"map step {step.name!r} of flow {flow!r} needs a list to map over, but "
        f"{what} is {_json_type(source)}"
    )


def fanout_error(flow: str, step: str, count: int, limit: int) -> str:
    """Why a map step may not create ``count`` tasks, over its ``limit`` (``max_tasks``).
    The SQL of ``flow_advance`` words it alike."""
    return (
        f"map step {step!r} would create {count} tasks, over its max_tasks of {limit} "
        f"(flow {flow!r}: set a higher max_tasks on the step or the flow to allow more)"
    )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def advance(
    shape: FlowShape,
    run_input: Any,
    outputs: Mapping[str, Any],
    started: Collection[str],
) -> Advance:
    """The steps that become ready now, their tasks, and whether the run ends.

    A step is ready when it has not started and every dependency completed. Maps over
    an empty list complete at once, which may make more steps ready (this repeats until
    nothing changes); a map over a non-list, or over a list longer than its
    ``max_tasks``, fails the run and stops there (none of its tasks is made).
    """
    done = dict(outputs)
    begun = set(started)
    tasks: list[NewTask] = []
    newly: list[str] = []
    completed: dict[str, Any] = {}
    progress = True
    while progress:
        progress = False
        for step in shape.steps:
            if step.name in done or step.name in begun:
                continue
            if not all(dep in done for dep in step.depends_on):
                continue
            if step.map_over is None:
                tasks.append(NewTask(step.name, 0, step_input(step, run_input, done)))
                begun.add(step.name)
                newly.append(step.name)
                continue
            source = run_input if step.map_over == RUN else done[step.map_over]
            message = map_error(shape.name, step, source)
            if message is None and len(source) > shape.max_tasks_of(step):
                message = fanout_error(shape.name, step.name, len(source), shape.max_tasks_of(step))
            if message is not None:
                return Advance(tuple(tasks), tuple(newly), completed, (step.name, message))
            if not source:
                done[step.name] = completed[step.name] = []
                progress = True
                continue
            tasks.extend(NewTask(step.name, i, item) for i, item in enumerate(source))
            begun.add(step.name)
            newly.append(step.name)
    output = None
    if all(step.name in done for step in shape.steps):
        output = {leaf: done[leaf] for leaf in shape.leaves()}
    return Advance(tuple(tasks), tuple(newly), completed, None, output)


def step_output(step: StepShape, task_outputs: Sequence[Any]) -> Any:
    """A completed step's output: its task's output, or a map's list in element order."""
    if step.map_over is None:
        return task_outputs[0]
    return list(task_outputs)


def retry_delay(base_delay: float, attempt: int) -> float:
    """Seconds before the next attempt after attempt ``attempt`` (from 1) failed:
    ``base_delay * 2**attempt``, capped at a day."""
    return float(min(86400.0, base_delay * 2 ** min(attempt, 30)))


@dataclass(frozen=True, slots=True)
class Rerun:
    """What a retry of an ended flow run runs again (`rerun`)."""

    #: the steps that run again, in definition order
    steps: tuple[str, ...]
    #: those of them whose input is kept (none of their dependencies runs again) and
    #: that have tasks: their tasks run again in place, with their ids (every task of a
    #: forced step, only the unfinished ones of the others). The other steps wait for
    #: their dependencies and get new tasks, as at the start.
    in_place: frozenset[str]
    #: the steps run again although they completed: ``from_step`` and what depends on
    #: it, directly or not
    forced: frozenset[str]


def rerun(
    shape: FlowShape,
    statuses: Mapping[str, str],
    with_tasks: Collection[str],
    from_step: str | None,
) -> Rerun:
    """What a retry of an ended flow run runs again: every step that did not complete
    (``statuses``: each step's status), and ``from_step`` with every step that depends
    on it, directly or not (`ValidationError` if the flow has no such step).
    ``with_tasks``: the steps that have tasks."""
    forced: set[str] = set()
    if from_step is not None:
        forced.add(shape.step(from_step).name)
        for step in shape.steps:  # topological order: a dependency comes first
            if forced.intersection(step.depends_on):
                forced.add(step.name)
    steps = tuple(
        step.name
        for step in shape.steps
        if step.name in forced or statuses.get(step.name) != "completed"
    )
    chosen = set(steps)
    in_place = frozenset(
        step.name
        for step in shape.steps
        if step.name in chosen
        and step.name in with_tasks
        and not chosen.intersection(step.depends_on)
    )
    return Rerun(steps, in_place, frozenset(forced))


def fork_copies(
    source: FlowShape,
    target: FlowShape,
    outputs: Mapping[str, Any],
    from_step: str | None,
) -> dict[str, Any]:
    """The completed steps a fork of a flow run keeps, with their outputs, in the
    target shape's order: a step of the source that completed (``outputs``), unless it
    is ``from_step`` or depends on it, directly or not (`ValidationError` if the
    source has no such step); that the target has with the same dependencies and the
    same map source; and whose dependencies are all kept. The others run in the fork."""
    forced = rerun(source, {}, (), from_step).forced
    before = {step.name: step for step in source.steps}
    kept: dict[str, Any] = {}
    for step in target.steps:
        old = before.get(step.name)
        if (
            old is not None
            and step.name in outputs
            and step.name not in forced
            and (old.depends_on, old.map_over) == (step.depends_on, step.map_over)
            and all(dep in kept for dep in step.depends_on)
        ):
            kept[step.name] = outputs[step.name]
    return kept


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a whole run ends, by the planner alone (the oracle of the property tests)."""

    status: str  # completed | failed
    output: dict[str, Any] | None
    #: the step that failed the run, or None
    failed_step: str | None
    #: outputs of the steps that completed
    outputs: dict[str, Any]


def simulate(
    shape: FlowShape,
    run_input: Any,
    handler: Callable[[str, int, Any], tuple[bool, Any]],
) -> Outcome:
    """Run a flow to its end with ``handler(step, index, input) -> (ok, output)``
    deciding each task (ok False: the task fails for good), tasks in insertion order."""
    outputs: dict[str, Any] = {}
    started: set[str] = set()
    pending: list[NewTask] = []
    results: dict[str, dict[int, Any]] = {}
    counts: dict[str, int] = {}

    def apply(step_advance: Advance) -> Outcome | None:
        outputs.update(step_advance.completed)
        started.update(step_advance.started)
        for name in step_advance.started:
            counts[name] = sum(1 for t in step_advance.tasks if t.step == name)
            results[name] = {}
        pending.extend(step_advance.tasks)
        if step_advance.failure is not None:
            return Outcome("failed", None, step_advance.failure[0], dict(outputs))
        if step_advance.output is not None:
            return Outcome("completed", step_advance.output, None, dict(outputs))
        return None

    ended = apply(advance(shape, run_input, outputs, started))
    while ended is None:
        task = pending.pop(0)
        ok, value = handler(task.step, task.index, task.input)
        if not ok:
            return Outcome("failed", None, task.step, dict(outputs))
        results[task.step][task.index] = value
        if len(results[task.step]) < counts[task.step]:
            continue
        step = shape.step(task.step)
        ordered = [results[task.step][i] for i in range(counts[task.step])]
        outputs[task.step] = step_output(step, ordered)
        ended = apply(advance(shape, run_input, outputs, started))
    return ended
