"""The shape of a DAG flow (DESIGN §6): its steps, their dependencies and options.

A shape is data: it is stored when the app opens (flows, steps, dependencies), fixed
per version, and read back by the backends, the dashboard and SQL. Every check runs
when a step is added, so a bad definition is refused before anything is stored:

* a duplicate step name;
* an unknown dependency (dependencies must be defined first, as SQL's ``add_step``
  requires: topological order);
* a cycle (a step that depends on itself; with dependencies defined first, no longer
  cycle can form, and `check_shape` finds one in a shape given whole);
* a map over something that is neither ``"run"`` nor one of the step's dependencies.

This module is pure: no I/O, importable from every layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError
from ..names import validate_step_name, validate_workflow_name
from ..validation import check_int, is_number

__all__ = [
    "DEFAULT_BASE_DELAY",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_TASKS",
    "DEFAULT_TIMEOUT",
    "RUN",
    "FlowShape",
    "StepShape",
    "check_shape",
    "task_workflow",
]

#: The name a map step uses to fan out over the run's input.
RUN = "run"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BASE_DELAY = 1.0
DEFAULT_TIMEOUT = 60.0
#: The most tasks a map step creates unless its flow or the step says otherwise.
DEFAULT_MAX_TASKS = 10_000
_MAX_STEPS = 1000


def _check_seconds(value: object, what: str, *, positive: bool) -> float:
    if not is_number(value):
        raise ValidationError(f"{what} must be a number of seconds, got {value!r}")
    seconds = float(value)  # type: ignore[arg-type]
    if not (seconds > 0 if positive else seconds >= 0) or seconds > 365 * 86400:
        bound = "more than 0" if positive else "at least 0"
        raise ValidationError(f"{what} must be {bound} and at most a year, got {value!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step of a flow.

    Attributes:
        name: the step's name (letters, digits, ``.``, ``_``, ``-``).
        depends_on: the steps whose outputs it takes, in the order given.
        map_over: None for a single task; ``"run"`` or a dependency's name for a map
            step (one task per element of that list).
        max_attempts / base_delay / timeout: per-step overrides (None: the flow's).
        max_tasks: a map step's bound on its tasks (None: the flow's): a map over a
            longer list fails the run instead of creating any task.
        concurrency / key_concurrency / rate_limit / rate_period: the step's flow-control
            limits (see `perdure.limits`; None: not limited that way); ``rate_keyed``
            and ``fifo`` say whether it has a rate-limit key and a FIFO key function
            (the functions themselves are code, not shape: see `perdure.flows.dsl.Flow`).
    """

    name: str
    depends_on: tuple[str, ...] = ()
    map_over: str | None = None
    max_attempts: int | None = None
    base_delay: float | None = None
    timeout: float | None = None
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    rate_keyed: bool = False
    fifo: bool = False
    max_tasks: int | None = None

    @property
    def is_map(self) -> bool:
        """True for a map step."""
        return self.map_over is not None

    @property
    def limited(self) -> bool:
        """True if the step declares any flow-control limit (its tasks carry a lane)."""
        return (
            self.concurrency is not None
            or self.key_concurrency is not None
            or self.rate_limit is not None
            or self.fifo
        )

    def keyless(self) -> tuple[str | None, str | None, str | None]:
        """The (lane, FIFO key, rate key) of the step's tasks in a run started without
        its key functions (from SQL, or by a process without the flow's code): the
        step's one lane ``''`` under its step-wide limits, no FIFO key; all None for
        a step without limits."""
        if not self.limited:
            return (None, None, None)
        return ("", None, "" if self.rate_limit is not None else None)

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON data (the stored and compared form)."""
        return {
            "name": self.name,
            "depends_on": list(self.depends_on),
            "map_over": self.map_over,
            "max_attempts": self.max_attempts,
            "base_delay": self.base_delay,
            "timeout": self.timeout,
            "concurrency": self.concurrency,
            "key_concurrency": self.key_concurrency,
            "rate_limit": self.rate_limit,
            "rate_period": self.rate_period,
            "rate_keyed": self.rate_keyed,
            "fifo": self.fifo,
            "max_tasks": self.max_tasks,
        }


@dataclass(frozen=True, slots=True)
class FlowShape:
    """A flow's shape at one version: options and steps in topological order.

    ``max_tasks`` bounds each map step's tasks (a step may set its own bound)."""

    name: str
    version: int = 1
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    base_delay: float = DEFAULT_BASE_DELAY
    timeout: float = DEFAULT_TIMEOUT
    steps: tuple[StepShape, ...] = field(default=())
    max_tasks: int = DEFAULT_MAX_TASKS

    def step(self, name: str) -> StepShape:
        """The step of that name (`ValidationError` if there is none)."""
        for step in self.steps:
            if step.name == name:
                return step
        raise ValidationError(f"flow {self.name!r} has no step {name!r}")

    def leaves(self) -> list[str]:
        """Steps no other step depends on, in definition order: the run's output keys."""
        used = {dep for step in self.steps for dep in step.depends_on}
        return [step.name for step in self.steps if step.name not in used]

    def dependents(self, name: str) -> list[str]:
        """Steps that depend on ``name``, in definition order."""
        return [step.name for step in self.steps if name in step.depends_on]

    def max_attempts_of(self, step: StepShape) -> int:
        """The step's attempts (its own, else the flow's)."""
        return self.max_attempts if step.max_attempts is None else step.max_attempts

    def base_delay_of(self, step: StepShape) -> float:
        """The step's base retry delay in seconds (its own, else the flow's)."""
        return self.base_delay if step.base_delay is None else step.base_delay

    def timeout_of(self, step: StepShape) -> float:
        """The step's timeout in seconds (its own, else the flow's)."""
        return self.timeout if step.timeout is None else step.timeout

    def max_tasks_of(self, step: StepShape) -> int:
        """The most tasks the map step may create (its own bound, else the flow's)."""
        return self.max_tasks if step.max_tasks is None else step.max_tasks

    def with_step(self, step: StepShape) -> FlowShape:
        """This shape with one more step, checked (`ValidationError` otherwise)."""
        shape = FlowShape(
            self.name,
            self.version,
            self.max_attempts,
            self.base_delay,
            self.timeout,
            (*self.steps, step),
            self.max_tasks,
        )
        check_shape(shape, require_order=True)
        return shape

    def to_dict(self) -> dict[str, Any]:
        """The shape as JSON data."""
        return {
            "name": self.name,
            "version": self.version,
            "max_attempts": self.max_attempts,
            "base_delay": self.base_delay,
            "timeout": self.timeout,
            "max_tasks": self.max_tasks,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FlowShape:
        """A shape from `to_dict` data (checked)."""
        shape = cls(
            name=data["name"],
            version=data.get("version", 1),
            max_attempts=data.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
            base_delay=data.get("base_delay", DEFAULT_BASE_DELAY),
            timeout=data.get("timeout", DEFAULT_TIMEOUT),
            max_tasks=data.get("max_tasks", DEFAULT_MAX_TASKS),
            steps=tuple(
                StepShape(
                    name=s["name"],
                    depends_on=tuple(s.get("depends_on") or ()),
                    map_over=s.get("map_over"),
                    max_attempts=s.get("max_attempts"),
                    base_delay=s.get("base_delay"),
                    timeout=s.get("timeout"),
                    concurrency=s.get("concurrency"),
                    key_concurrency=s.get("key_concurrency"),
                    rate_limit=s.get("rate_limit"),
                    rate_period=s.get("rate_period"),
                    rate_keyed=bool(s.get("rate_keyed", False)),
                    fifo=bool(s.get("fifo", False)),
                    max_tasks=s.get("max_tasks"),
                )
                for s in data.get("steps", ())
            ),
        )
        check_shape(shape)
        return shape


def make_step(
    name: object,
    depends_on: Iterable[str] = (),
    *,
    map_over: str | None = None,
    max_attempts: int | None = None,
    base_delay: float | None = None,
    timeout: float | None = None,
    max_tasks: int | None = None,
) -> StepShape:
    """A step with its options validated (the dependencies are checked by the shape).

    A map step over a dependency depends on it even when ``depends_on`` leaves it out;
    ``max_tasks`` is for map steps only.
    """
    step_name = validate_step_name(name)
    if isinstance(depends_on, str):
        raise ValidationError(
            f"depends_on of step {step_name!r} must be a list of step names, got a string"
        )
    deps = tuple(validate_step_name(d, what="dependency name") for d in depends_on)
    if map_over is not None:
        validate_step_name(map_over, what="map source")
        if map_over != RUN and map_over not in deps:
            deps = (*deps, map_over)
    return StepShape(
        name=step_name,
        depends_on=deps,
        map_over=map_over,
        max_attempts=None
        if max_attempts is None
        else check_int(max_attempts, f"max_attempts of step {step_name!r}", minimum=1),
        base_delay=None
        if base_delay is None
        else _check_seconds(base_delay, f"base_delay of step {step_name!r}", positive=False),
        timeout=None
        if timeout is None
        else _check_seconds(timeout, f"timeout of step {step_name!r}", positive=True),
        max_tasks=None if max_tasks is None else _check_max_tasks(max_tasks, step_name, map_over),
    )


def _check_max_tasks(value: object, step: str, map_over: str | None) -> int:
    if map_over is None:
        raise ValidationError(
            f"max_tasks of step {step!r} is for map steps only (a single step has one task)"
        )
    return check_int(value, f"max_tasks of step {step!r}", minimum=1)


def make_shape(
    name: object,
    *,
    version: int = 1,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    base_delay: float = DEFAULT_BASE_DELAY,
    timeout: float = DEFAULT_TIMEOUT,
    max_tasks: int = DEFAULT_MAX_TASKS,
) -> FlowShape:
    """An empty flow shape with its options validated."""
    flow = validate_workflow_name(name)
    return FlowShape(
        name=flow,
        version=check_int(version, f"version of flow {flow!r}", minimum=1),
        max_attempts=check_int(max_attempts, f"max_attempts of flow {flow!r}", minimum=1),
        base_delay=_check_seconds(base_delay, f"base_delay of flow {flow!r}", positive=False),
        timeout=_check_seconds(timeout, f"timeout of flow {flow!r}", positive=True),
        max_tasks=check_int(max_tasks, f"max_tasks of flow {flow!r}", minimum=1),
    )


def check_shape(shape: FlowShape, *, require_order: bool = False) -> None:
    """Refuse a bad shape with a `ValidationError` naming the step: duplicate names,
    unknown dependencies, cycles, a map over neither the run nor a dependency, a
    ``max_tasks`` that is not a positive integer or is on a single step. With
    ``require_order``, a dependency must also come before the step that uses it."""
    validate_workflow_name(shape.name)
    check_int(shape.max_tasks, f"max_tasks of flow {shape.name!r}", minimum=1)
    if len(shape.steps) > _MAX_STEPS:
        raise ValidationError(f"flow {shape.name!r} has more than {_MAX_STEPS} steps")
    names: dict[str, int] = {}
    for index, step in enumerate(shape.steps):
        validate_step_name(step.name)
        if step.max_tasks is not None:
            _check_max_tasks(step.max_tasks, step.name, step.map_over)
        if step.name in names:
            raise ValidationError(f"flow {shape.name!r} defines step {step.name!r} twice")
        names[step.name] = index
    for index, step in enumerate(shape.steps):
        if len(set(step.depends_on)) != len(step.depends_on):
            raise ValidationError(
                f"step {step.name!r} of flow {shape.name!r} lists a dependency twice"
            )
        for dep in step.depends_on:
            if dep == step.name:
                raise ValidationError(
                    f"step {step.name!r} of flow {shape.name!r} depends on itself (a cycle)"
                )
            if dep not in names or (require_order and names[dep] > index):
                raise ValidationError(
                    f"step {step.name!r} of flow {shape.name!r} depends on unknown step "
                    f"{dep!r} (define a step's dependencies before it)"
                )
        if step.map_over not in (None, RUN, *step.depends_on):
            raise ValidationError(
                f"map step {step.name!r} of flow {shape.name!r} maps over "
                f"{step.map_over!r}, which is neither 'run' nor one of its dependencies"
            )
    cycle = _find_cycle(shape.steps)
    if cycle:
        raise ValidationError(f"flow {shape.name!r} has a cycle: {' -> '.join(cycle)}")


def _find_cycle(steps: Sequence[StepShape]) -> list[str]:
    """A cycle of dependencies (as a path that returns to its start), or []."""
    deps = {s.name: s.depends_on for s in steps}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, ()):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for name in deps:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return []


def task_workflow(flow: str, step: str) -> str:
    """The workflow name of a step's task rows (``flow:step``): the colon cannot occur
    in a workflow name, so it never collides with one, and a worker claims the tasks of
    exactly the steps it has handlers for through the ordinary claim."""
    return f"{flow}:{step}"
