"""The Python DSL of DAG flows: ``app.flow(...)``, ``@flow.step``, ``@flow.map`` and
``flow.external_step`` (DESIGN §6).

```python
analyze = app.flow("analyze_website", max_attempts=3, base_delay=5, timeout=10)

@analyze.step
async def website(ctx, input):          # input == {"run": <run input>}
    return {"content": "..."}

@analyze.step(depends_on=[website])
async def sentiment(ctx, input):        # {"run": ..., "website": {...}}
    return {"score": 0.8}

@analyze.map(over="website")            # one task per element of website's list
async def per_item(ctx, item): ...
```

Every definition error (a duplicate step, an unknown dependency, a cycle, a map over
something that is neither the run nor a dependency, a bad option) raises
`ValidationError` when the step is defined, before anything is stored; bad
flow-control options (``concurrency=``, ``rate_limit=``, ...) raise
`ConfigurationError`, as they do on a workflow.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, overload

from ..errors import ConfigurationError, ValidationError
from ..limits import KeyFn, Limits
from .definition import (
    DEFAULT_MAX_TASKS,
    FlowShape,
    StepShape,
    make_shape,
    make_step,
    task_workflow,
)

__all__ = ["Flow", "TaskContext"]

Handler = Callable[..., Awaitable[Any]] | Callable[..., Any]
H = TypeVar("H", bound=Callable[..., Any])
StepRef = str | Callable[..., Any]
StepKeys = tuple[str, str | None, str | None, str | None]  # step, lane, FIFO key, rate key


@dataclass(slots=True)
class TaskContext:
    """What a flow step's handler gets as ``ctx``.

    Attributes:
        run_id: the flow run's id.
        flow: the flow's name.
        step: the step's name.
        task_index: the element's index for a map step, else 0.
        attempt: this attempt's number, from 1.
        task_id: the task's own run id (its audit trail shows every attempt).
        cancelled: set when the task is cancelled (the flow failed or was cancelled).
        log: a logger tagged with the run, step and task.
    """

    run_id: str
    flow: str
    step: str
    task_index: int
    attempt: int
    task_id: str
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    log: logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.LoggerAdapter(logging.getLogger("perdure.flow"))
    )

    @property
    def idempotency_key(self) -> str:
        """``"<task id>"``, the same on every attempt: hand it to external APIs."""
        return self.task_id


def _step_name(ref: StepRef) -> str:
    name = getattr(ref, "__perdure_step__", ref)
    if not isinstance(name, str):
        raise ValidationError(
            f"depends_on takes step names or functions decorated as steps, got {ref!r:.80}"
        )
    return name


class Flow:
    """A DAG flow: create it with `App.flow`, then add steps with its decorators.

    A flow is started, listed, read and cancelled like a workflow (``app.start(flow,
    input)``, ``app.get_steps(run_id)`` shows each step with its tasks). Its shape is
    stored when the app first touches the database, fixed per version: define every
    step before that, and give a changed flow a new ``version``.
    """

    def __init__(
        self,
        name: str,
        *,
        version: int = 1,
        max_attempts: int = 3,
        base_delay: float = 1.0,
        timeout: float = 60.0,
        max_tasks: int = DEFAULT_MAX_TASKS,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.shape: FlowShape = make_shape(
            name,
            version=version,
            max_attempts=max_attempts,
            base_delay=base_delay,
            timeout=timeout,
            max_tasks=max_tasks,
        )
        #: handlers by step name (external steps have none)
        self.handlers: dict[str, Handler] = {}
        #: the flow-control limits (with their key functions) of the limited steps
        self.limits: dict[str, Limits] = {}
        self._on_change = on_change

    @property
    def name(self) -> str:
        """The flow's name."""
        return self.shape.name

    @property
    def __perdure_name__(self) -> str:
        return self.shape.name

    @property
    def version(self) -> int:
        """The flow's version."""
        return self.shape.version

    def __repr__(self) -> str:
        return f"<perdure.Flow {self.name!r} v{self.version}: {[s.name for s in self.shape.steps]}>"

    def _add(self, step: StepShape, handler: Handler | None) -> None:
        self.shape = self.shape.with_step(step)
        if handler is not None:
            self.handlers[step.name] = handler
        self._on_change()

    @overload
    def step(
        self,
        fn: H,
        /,
        *,
        name: str | None = None,
        depends_on: Iterable[StepRef] = (),
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> H: ...

    @overload
    def step(
        self,
        /,
        *,
        name: str | None = None,
        depends_on: Iterable[StepRef] = (),
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> Callable[[H], H]: ...

    def step(
        self,
        fn: Any = None,
        /,
        *,
        name: str | None = None,
        depends_on: Iterable[StepRef] = (),
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> Any:
        """Add a step: ``async def handler(ctx, input)``, where ``input`` is
        ``{"run": <run input>, <dependency>: <its output>, ...}``. ``depends_on`` takes
        step functions or names, defined before this step. The options override the
        flow's for this step.

        ``concurrency``, ``concurrency_key`` with ``key_concurrency``, ``rate_limit``,
        ``rate_limit_key`` and ``fifo_key`` limit the step's tasks as `App.workflow`'s
        options limit a workflow's runs (validated the same way: a bad combination is
        a `ConfigurationError`); key functions get the flow run's input, once, when the
        run starts."""
        options = {"max_attempts": max_attempts, "base_delay": base_delay, "timeout": timeout}
        limits = {
            "concurrency": concurrency,
            "concurrency_key": concurrency_key,
            "key_concurrency": key_concurrency,
            "rate_limit": rate_limit,
            "rate_limit_key": rate_limit_key,
            "fifo_key": fifo_key,
        }
        return self._decorate(fn, name, self._deps(depends_on), None, options, limits)

    @overload
    def map(
        self,
        fn: H,
        /,
        *,
        over: StepRef,
        name: str | None = None,
        depends_on: Iterable[StepRef] = (),
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        max_tasks: int | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> H: ...

    @overload
    def map(
        self,
        /,
        *,
        over: StepRef,
        name: str | None = None,
        depends_on: Iterable[StepRef] = (),
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        max_tasks: int | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> Callable[[H], H]: ...

    def map(
        self,
        fn: Any = None,
        /,
        *,
        over: StepRef,
        name: str | None = None,
        depends_on: Iterable[StepRef] = (),
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        max_tasks: int | None = None,
        concurrency: int | None = None,
        concurrency_key: KeyFn | None = None,
        key_concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: KeyFn | None = None,
        fifo_key: KeyFn | None = None,
    ) -> Any:
        """Add a map step over ``"run"`` (the run's input) or a dependency's output,
        which must be a list: one task per element, ``async def handler(ctx, item)``;
        the step's output is the list of their outputs in element order (``[]`` at once
        for an empty list). A non-list fails the run with an error naming the step, and
        so does a list of more than ``max_tasks`` elements (default: the flow's), before
        any of its tasks is created.
        The flow-control options are `step`'s: they limit the map's tasks, and a key
        function gets the flow run's input (every task of a run shares its keys)."""
        options = {
            "max_attempts": max_attempts,
            "base_delay": base_delay,
            "timeout": timeout,
            "max_tasks": max_tasks,
        }
        limits = {
            "concurrency": concurrency,
            "concurrency_key": concurrency_key,
            "key_concurrency": key_concurrency,
            "rate_limit": rate_limit,
            "rate_limit_key": rate_limit_key,
            "fifo_key": fifo_key,
        }
        return self._decorate(fn, name, self._deps(depends_on), _step_name(over), options, limits)

    def _decorate(
        self,
        fn: Any,
        name: str | None,
        deps: list[str],
        map_over: str | None,
        options: dict[str, Any],
        limit_options: dict[str, Any],
    ) -> Any:
        """The decorator of `step` and `map` (applied at once when ``fn`` is given)."""

        def register(handler: H) -> H:
            step = make_step(_handler_name(handler, name), deps, map_over=map_over, **options)
            limits = Limits.build(task_workflow(self.name, step.name), **limit_options)
            step = _with_limits(step, limits)
            self._add(step, _checked(handler, step.name))
            if limits.declared:
                self.limits[step.name] = limits
            handler.__perdure_step__ = step.name  # type: ignore[attr-defined]
            return handler

        return register(fn) if fn is not None else register

    def external_step(
        self,
        name: str,
        *,
        depends_on: Iterable[StepRef] = (),
        map_over: StepRef | None = None,
        max_attempts: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        max_tasks: int | None = None,
    ) -> str:
        """Declare a step that another process serves (a worker in any language,
        through ``perdure.claim_tasks`` on PostgreSQL): part of the shape, with no
        handler here, so this app's workers never claim its tasks. Returns its name.
        ``max_tasks`` bounds a map step's tasks, as on `map`."""
        step = make_step(
            name,
            self._deps(depends_on),
            map_over=None if map_over is None else _step_name(map_over),
            max_attempts=max_attempts,
            base_delay=base_delay,
            timeout=timeout,
            max_tasks=max_tasks,
        )
        self._add(step, None)
        return step.name

    def _deps(self, depends_on: Iterable[StepRef]) -> list[str]:
        if isinstance(depends_on, str) or callable(depends_on):
            depends_on = [depends_on]
        return [_step_name(d) for d in depends_on]

    def step_keys(self, input_json: str) -> tuple[StepKeys, ...]:
        """The keys of a run's tasks, one (step, lane, FIFO key, rate key) per limited
        step, from the run's input (``input_json``): computed once, when the run
        starts (`NewRun.step_keys`). A key function that fails is a `ValidationError`,
        and nothing is stored."""
        if not self.limits:
            return ()
        value = json.loads(input_json)
        found: list[StepKeys] = []
        for step, limits in self.limits.items():
            keys = limits.keys(task_workflow(self.name, step), value)
            found.append((step, keys.lane, keys.fifo, keys.rate))
        return tuple(found)

    def task_workflows(self) -> dict[str, str]:
        """The task workflow name (``flow:step``) of each step this process serves."""
        return {task_workflow(self.name, step): step for step in self.handlers}


def _with_limits(step: StepShape, limits: Limits) -> StepShape:
    """The step with its limits as shape (what is stored and compared per version)."""
    if not limits.declared:
        return step
    return replace(
        step,
        concurrency=limits.concurrency,
        key_concurrency=limits.key_concurrency,
        rate_limit=limits.rate_limit,
        rate_period=limits.rate_period,
        rate_keyed=limits.rate_limit_key is not None,
        fifo=limits.fifo_key is not None,
    )


def _handler_name(handler: Callable[..., Any], name: str | None) -> str:
    if name is not None:
        return name
    found = getattr(handler, "__name__", None)
    if not isinstance(found, str):
        raise ConfigurationError(f"give the step a name: {handler!r} has no __name__")
    return found


def _checked(handler: Any, step: str) -> Handler:
    if not callable(handler):
        raise ConfigurationError(f"step {step!r} needs a function, got {handler!r:.80}")
    return handler  # type: ignore[no-any-return]
