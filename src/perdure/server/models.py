"""The JSON shapes of the REST API (camelCase on the wire), as pydantic models so the
OpenAPI document describes every request and answer."""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from ..redaction import Redaction
from .strict import Cancellable, Int32, Retryable, Seconds, Time

__all__ = [
    "ApiError",
    "BulkCancelIn",
    "BulkRetryIn",
    "ErrorBody",
    "EventOut",
    "List",
    "PublishedOut",
    "RunOut",
    "SignalIn",
    "StartIn",
    "StartOut",
    "StepOut",
    "SubscriptionIn",
    "TopicSubscriptionIn",
    "WorkerOut",
    "WorkflowOut",
]

T = TypeVar("T")

#: The redaction of the App serving the current request (set by `Redacting`).
SHOWN: ContextVar[Redaction | None] = ContextVar("perdure_shown", default=None)


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown request fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    @classmethod
    def of(cls, record: Any) -> Any:
        """The model of a perdure record (a dataclass), its data masked by the serving
        App's redaction."""
        redaction = SHOWN.get()
        if redaction is not None:
            record = redaction.record(record)
        return cls.model_validate(
            {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        )


class In(Model):
    """A request body as the OpenAPI document describes it: strict types (no boolean
    or string taken as a number, no number as a time) and camelCase names only."""

    model_config = ConfigDict(strict=True, populate_by_name=False)


#: A failure as stored on a run, a step or a task: documented, never reshaped.
Failure = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "Why it failed. `traceback` is Python's traceback as text, "
            "last frame last (absent when the failure did not come from Python code: a "
            "timeout, a cancel, another language's worker); other keys may be added.",
            "properties": {
                "type": {"type": "string", "description": "The exception's class name."},
                "message": {"type": "string"},
                "traceback": {"type": "string"},
            },
            "additionalProperties": True,
        }
    ),
]


class ApiError(Model):
    """What went wrong, in words a user understands."""

    type: str = Field(description="The kind of error, e.g. ValidationError or RunNotFound.")
    message: str


class ErrorBody(Model):
    """Every error answer: ``{"error": {"type", "message"}}``."""

    error: ApiError


class List(Model, Generic[T]):
    """A page of a list; pass ``nextCursor`` back as ``cursor`` for the next page."""

    items: list[T]
    next_cursor: str | None = None


class StartIn(In):
    """A run to start. The same ``idempotencyKey`` (per workflow) returns the existing run."""

    input: Any = None
    version: Int32 | None = Field(default=None, ge=1)
    idempotency_key: str | None = None
    retention_days: Int32 | None = Field(default=None, ge=0)
    priority: Int32 | None = Field(default=None, description="Lower runs first (default 100).")
    delay_seconds: Seconds | None = None
    run_id: str | None = None


class StartOut(Model):
    """A started run (201), or the existing one (200)."""

    run_id: str
    created: bool
    status: str
    warning: str | None = Field(
        default=None, description="Set when no process has registered the workflow yet."
    )


class RunOut(Model):
    """One run, as stored."""

    id: str
    workflow: str
    version: int | None
    status: str
    input: Any
    output: Any
    error: Failure | None
    attempt: int
    priority: int
    parent_id: str | None
    parent_step: str | None = None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    updated_at: datetime | None = None
    wake_at: datetime | None
    wake_reason: str | None = None
    deadline_at: datetime | None
    idempotency_key: str | None = None
    retention_days: int = 30


class TaskOut(Model):
    """One task of a DAG-flow step (``runId``: the task's own row)."""

    index: int
    status: str
    attempts: int
    output: Any
    error: Failure | None
    run_id: str
    started_at: datetime | None
    completed_at: datetime | None


class StepOut(Model):
    """One journal row (``superseded``: a row a retry replaced, kept as history); of a
    flow run, one flow step with its ``tasks``."""

    name: str
    kind: str
    status: str
    output: Any
    error: Failure | None
    attempts: int
    started_at: datetime | None
    completed_at: datetime | None
    superseded: bool = False
    tasks: list[TaskOut] = []

    @classmethod
    def of(cls, record: Any) -> Any:
        """The model of a `perdure.Step`, its tasks included, masked as `Model.of`."""
        redaction = SHOWN.get()
        if redaction is not None:
            record = redaction.record(record)
        data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        data["tasks"] = [TaskOut.of(t) for t in record.tasks]
        return cls.model_validate(data)


class FlowStepOut(Model):
    """A step of a flow's shape (``mapOver``: ``run`` or a dependency, for a map step;
    null options: the flow's; ``maxTasks``: a map step's bound on its tasks)."""

    name: str
    depends_on: list[str]
    map_over: str | None
    max_attempts: int | None
    base_delay: float | None
    timeout: float | None
    max_tasks: int | None


class FlowOut(Model):
    """A DAG flow's stored shape at one version (``maxTasks``: the most tasks a map
    step creates, unless the step sets its own)."""

    name: str
    version: int
    max_attempts: int
    base_delay: float
    timeout: float
    max_tasks: int
    steps: list[FlowStepOut]
    leaves: list[str]


class EventOut(Model):
    """One entry of a run's audit trail."""

    type: str
    data: Any
    created_at: datetime


class WorkflowOut(Model):
    """A known workflow and its number of runs per status."""

    name: str
    counts: dict[str, int]


class WorkerOut(Model):
    """A worker process, live or recently stopped."""

    id: str
    host: str
    pid: int
    workflows: list[str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None = None


class PublishedOut(Model):
    """What a published event did."""

    started: list[str]
    resumed: list[str]


class SignalIn(In):
    """A signal as one JSON body: the event, its payload (any JSON value) and an
    optional ``idempotencyKey`` (the same key delivers once)."""

    event: str
    payload: Any = None
    idempotency_key: str | None = None


class SignalOut(Model):
    """Whether the signal was delivered (or buffered); false when the run had ended."""

    delivered: bool


class CancelOut(Model):
    """Whether the run was live (and is cancelled now)."""

    run_id: str
    cancelled: bool


class SubscriptionIn(In):
    """A durable topic subscription: start ``workflow`` for events matching ``pattern``."""

    pattern: str
    workflow: str


class TopicSubscriptionIn(Model):
    """Seed 000's subscription body: ``{"type": "workflow", "workflow": name}`` (the
    seed's ``name`` is accepted for ``workflow``)."""

    type: Literal["workflow"]
    workflow: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> TopicSubscriptionIn:
        if (self.workflow is None) == (self.name is None):
            raise ValueError("give the workflow to start as workflow (or name), once")
        return self

    @property
    def target(self) -> str:
        """The workflow to start."""
        return self.workflow or self.name or ""


class SubscriptionOut(Model):
    """A topic subscription, and whether this call changed anything."""

    pattern: str
    workflow: str
    changed: bool = True


class HealthOut(Model):
    """The server and its database answer."""

    status: str
    database: str


class RetryIn(In):
    """Where a retry resumes: ``fromStep`` (default: the step that failed)."""

    from_step: str | None = None


class ForkIn(In):
    """A fork: the journal before ``fromStep`` is copied (default: all of it); the new
    run's ``input`` and ``version`` default to the source's."""

    from_step: str | None = None
    input: Any = None
    version: Int32 | None = Field(default=None, ge=1)


class RunIdOut(Model):
    """The run an operation resumed or created."""

    run_id: str


class BulkIn(In):
    """Which runs of the workflow a bulk operation takes (the filters of the listing)."""

    since: Time | None = Field(default=None, description="Created at or after this time.")
    until: Time | None = Field(default=None, description="Created before this time.")
    input: Any = Field(default=None, description="A JSON value the input must contain.")


class BulkRetryIn(BulkIn):
    """The runs to retry: ``status`` failed (the default) or cancelled."""

    status: Retryable = "failed"


class BulkCancelIn(BulkIn):
    """The live runs to cancel: ``status`` pending, running or waiting (default: all
    three)."""

    status: Cancellable | None = None


class BulkOut(Model):
    """The runs the bulk operation changed."""

    run_ids: list[str]


class ScheduleIn(In):
    """A cron schedule to create or update: each tick starts one run of ``workflow``
    with ``input`` plus ``scheduled_at``."""

    name: str
    workflow: str
    cron: str = Field(description='Five cron fields, e.g. "0 9 * * MON-FRI".')
    input: dict[str, Any] | None = None
    timezone: str = Field("UTC", description="IANA time zone the cron is read in.")
    catch_up: Literal["latest", "all", "none"] = Field(
        "latest", description="Missed ticks: latest, all or none."
    )


class ScheduleOut(Model):
    """A stored schedule and its next tick."""

    name: str
    workflow: str
    cron: str
    timezone: str
    catch_up: str
    paused: bool
    next_at: datetime
    input: Any = None
    last_fired_at: datetime | None = None
    created_at: datetime | None = None
