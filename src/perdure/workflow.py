"""Workflow definitions: what `@app.workflow` records, with its options validated."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .durations import Duration, to_seconds
from .errors import ConfigurationError, ValidationError
from .flows.definition import task_workflow
from .limits import NO_LIMITS, KeyFn, Limits
from .names import glob_matches, validate_pattern, validate_workflow_name
from .retry import DEFAULT_STEP_RETRY, DEFAULT_WORKFLOW_RETRY, RetryPolicy
from .schedules import check_cron, check_timezone
from .typed import input_type, rebuild
from .validation import check_int

if TYPE_CHECKING:
    from .context import Context
    from .flows.dsl import Flow

__all__ = ["Registry", "WorkflowDefinition", "define_workflow"]

Body = Callable[..., Awaitable[Any]]

DEFAULT_PRIORITY = 100
DEFAULT_RETENTION_DAYS = 30


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A registered workflow: the body and its options.

    Attributes:
        name: the workflow's name (default: the function's name).
        version: runs keep the version they started with. Default 1.
        fn: the ``async def body(ctx, input)``.
        retention_days: days a finished run is kept. Default 30.
        retry: workflow-level retry of the body. Default: 1 attempt (no retry).
        step_retry: the policy of every step that gives none. Default: 3 attempts,
            exponential 1s→60s with 20% jitter.
        deadline: seconds after start when the run fails with DeadlineExceeded, or None.
        priority: lower runs first. Default 100.
        on: topic patterns that start this workflow when published.
        limits: flow control (concurrency, keys, rate limit, FIFO); see `perdure.limits`.
        schedule: a cron expression whose ticks start this workflow, or None.
        timezone: the IANA zone the schedule's cron is read in.
        on_divergence: ``"park"`` or ``"fail"``: what a run whose replay diverged does.
    """

    name: str
    version: int
    fn: Body
    retention_days: int = DEFAULT_RETENTION_DAYS
    retry: RetryPolicy = DEFAULT_WORKFLOW_RETRY
    step_retry: RetryPolicy = DEFAULT_STEP_RETRY
    deadline: float | None = None
    priority: int = DEFAULT_PRIORITY
    on: tuple[str, ...] = ()
    takes_input: bool = True
    limits: Limits = NO_LIMITS
    schedule: str | None = None
    timezone: str = "UTC"
    on_divergence: str = "park"

    async def call(self, ctx: Context, value: Any) -> Any:
        """Run the body once (an input annotated as a dataclass or pydantic model is
        rebuilt as that type)."""
        if self.takes_input:
            return await self.fn(ctx, rebuild(value, input_type(self.fn)))
        return await self.fn(ctx)

    def options(self) -> dict[str, Any]:
        """The options stored in the database registry (for producers without code)."""
        opts: dict[str, Any] = {"retention_days": self.retention_days, "priority": self.priority}
        if self.deadline is not None:
            opts["deadline_seconds"] = self.deadline
        if self.limits.declared:  # a start by a process without this code keys it ''
            opts["limited"] = {"rate": self.limits.rate_limit is not None}
        return opts


def retention_to_days(retention: Duration | None, *, what: str = "retention") -> int:
    """Whole days of a retention duration (rounded up; at least 0)."""
    if retention is None:
        return DEFAULT_RETENTION_DAYS
    if isinstance(retention, int) and not isinstance(retention, bool):
        seconds = float(retention) * 86400  # a bare integer means days
    else:
        seconds = to_seconds(retention, what=what)
    days = int(-(-seconds // 86400))
    return days


def define_workflow(
    fn: Body,
    *,
    name: str | None = None,
    version: int = 1,
    retention: Duration | None = None,
    retry: RetryPolicy | None = None,
    step_retry: RetryPolicy | None = None,
    deadline: Duration | None = None,
    priority: int | None = None,
    on: Iterable[str] | str | None = None,
    schedule: str | None = None,
    timezone: str = "UTC",
    concurrency: int | None = None,
    concurrency_key: KeyFn | None = None,
    key_concurrency: int | None = None,
    rate_limit: str | None = None,
    rate_limit_key: KeyFn | None = None,
    fifo_key: KeyFn | None = None,
    on_divergence: str = "park",
) -> WorkflowDefinition:
    """Validate decorator options and build the definition."""
    if not inspect.iscoroutinefunction(fn):
        raise ConfigurationError(
            f"workflow {getattr(fn, '__name__', fn)!r} must be an 'async def' function"
        )
    wf_name = validate_workflow_name(name if name is not None else fn.__name__)
    check_int(version, "workflow version", minimum=1)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ValidationError("retry must be a perdure.RetryPolicy")
    if step_retry is not None and not isinstance(step_retry, RetryPolicy):
        raise ValidationError("step_retry must be a perdure.RetryPolicy")
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not params:
        raise ConfigurationError(
            f"workflow {wf_name!r} must take the context: async def {wf_name}(ctx, input)"
        )
    if on_divergence not in ("park", "fail"):
        raise ValidationError(f"on_divergence must be 'park' or 'fail', not {on_divergence!r}")
    topics: tuple[str, ...]
    if on is None:
        topics = ()
    elif isinstance(on, str):
        topics = (validate_pattern(on, what="topic pattern"),)
    else:
        topics = tuple(validate_pattern(t, what="topic pattern") for t in on)
    return WorkflowDefinition(
        name=wf_name,
        version=version,
        fn=fn,
        retention_days=retention_to_days(retention),
        retry=retry or DEFAULT_WORKFLOW_RETRY,
        step_retry=step_retry or DEFAULT_STEP_RETRY,
        deadline=None if deadline is None else to_seconds(deadline, what="deadline"),
        priority=check_int(DEFAULT_PRIORITY if priority is None else priority, "priority"),
        on=topics,
        takes_input=len(params) >= 2,
        limits=Limits.build(
            wf_name,
            concurrency=concurrency,
            concurrency_key=concurrency_key,
            key_concurrency=key_concurrency,
            rate_limit=rate_limit,
            rate_limit_key=rate_limit_key,
            fifo_key=fifo_key,
        ),
        schedule=None if schedule is None else check_cron(schedule),
        timezone=check_timezone(timezone),
        on_divergence=on_divergence,
    )


class Registry:
    """Workflow definitions by name and version."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[int, WorkflowDefinition]] = {}
        self._flows: dict[str, dict[int, Flow]] = {}
        self.generation = 0  # bumps on every registration

    def changed(self) -> None:
        """A definition changed (a flow got a step): store it again."""
        self.generation += 1

    def add_flow(self, flow: Flow) -> None:
        """Register a DAG flow; a flow's name is not a workflow's, nor twice a flow's."""
        if flow.name in self._by_name:
            raise ConfigurationError(f"{flow.name!r} is registered as a workflow already")
        versions = self._flows.setdefault(flow.name, {})
        if flow.version in versions:
            raise ConfigurationError(
                f"flow {flow.name!r} version {flow.version} is registered twice"
            )
        versions[flow.version] = flow
        self.generation += 1

    def flow(self, name: str, version: int | None = None) -> Flow | None:
        """The flow of that version, or the highest version; None if unknown."""
        versions = self._flows.get(name)
        if not versions:
            return None
        if version is None:
            return versions[max(versions)]
        return versions.get(version)

    def flows(self) -> list[Flow]:
        """Every flow, sorted by name and version."""
        return [f for name in sorted(self._flows) for _, f in sorted(self._flows[name].items())]

    def task(self, workflow: str, version: int | None) -> tuple[Flow, str] | None:
        """The flow and step whose tasks run as ``workflow`` (``flow:step``), if this
        process has a handler for that step."""
        name, colon, step = workflow.partition(":")
        flow = self.flow(name, version) if colon else None
        if flow is None or step not in flow.handlers:
            return None
        return flow, step

    def task_pairs(self, patterns: Iterable[str] | None) -> list[tuple[str, int]]:
        """(``flow:step``, version) of every step with a handler, of the flows whose
        name matches a glob in ``patterns`` (all when None): what a worker claims."""
        pats = None if patterns is None else list(patterns)
        return [
            (task_name, flow.version)
            for flow in self.flows()
            if pats is None or any(glob_matches(p, flow.name) for p in pats)
            for task_name in flow.task_workflows()
        ]

    def task_limits(self, patterns: Iterable[str] | None) -> list[tuple[str, Limits]]:
        """(``flow:step``, limits) of every limited step with a handler, of the flows
        whose name matches a glob in ``patterns`` (all when None), lowest version first
        (`claim_limits` keeps the last: the highest version's)."""
        pats = None if patterns is None else list(patterns)
        return [
            (task_workflow(flow.name, step), limits)
            for flow in self.flows()
            if pats is None or any(glob_matches(p, flow.name) for p in pats)
            for step, limits in flow.limits.items()
        ]

    def add(self, definition: WorkflowDefinition) -> None:
        """Register a definition; the same (name, version) twice is an error."""
        if definition.name in self._flows:
            raise ConfigurationError(f"{definition.name!r} is registered as a flow already")
        versions = self._by_name.setdefault(definition.name, {})
        if definition.version in versions and versions[definition.version].fn is not definition.fn:
            raise ConfigurationError(
                f"workflow {definition.name!r} version {definition.version} is registered twice"
            )
        versions[definition.version] = definition
        self.generation += 1

    def get(self, name: str, version: int | None = None) -> WorkflowDefinition | None:
        """The definition of that version, or the highest version; None if unknown."""
        versions = self._by_name.get(name)
        if not versions:
            return None
        if version is None:
            return versions[max(versions)]
        return versions.get(version)

    def all(self) -> list[WorkflowDefinition]:
        """Every definition, sorted by name and version."""
        return [d for name in sorted(self._by_name) for _, d in sorted(self._by_name[name].items())]

    def select(self, patterns: Iterable[str] | None) -> list[WorkflowDefinition]:
        """Definitions whose name matches any glob in ``patterns`` (all when None)."""
        if patterns is None:
            return self.all()
        pats = list(patterns)
        return [d for d in self.all() if any(glob_matches(p, d.name) for p in pats)]
