"""Typed records that cross the storage contract, and the public read models.

Public records (exported from `perdure`): `Run`, `Step`, `Event`, `WorkflowSummary`,
`WorkerInfo`, `Page`, `Published`, `Schedule`. The rest are the parameters and results of the
backend contract (`perdure.backends.base.Backend`).

JSON values cross the contract twice differently: values *written* are already
encoded text (``*_json`` fields, encoded once by `perdure.serialization`); values
*read* back are decoded Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

RunStatus = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]
RUN_STATUSES: tuple[str, ...] = (
    "pending",
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
ACTIVE_STATUSES: frozenset[str] = frozenset({"pending", "running", "waiting"})

StepKind = Literal["run", "sleep", "wait", "child", "rollback"]
StepStatus = Literal["completed", "failed", "retrying"]
WakeReason = Literal[
    "sleep", "event", "retry", "child", "version", "released", "undecodable", "divergence"
]


# --------------------------------------------------------------------------- public


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a workflow, as stored.

    ``wake_at`` is when a pending or waiting run next becomes claimable (``None``
    when it waits only for an event, or when it is running or ended). ``version`` is
    None until a worker claims a run started by the name of a workflow no process had
    registered; the claim fixes it to that worker's highest version.
    """

    id: str
    workflow: str
    version: int | None
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    attempt: int
    priority: int
    parent_id: str | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    wake_at: datetime | None
    deadline_at: datetime | None
    idempotency_key: str | None = None
    wake_reason: str | None = None
    retention_days: int = 30
    updated_at: datetime | None = None
    parent_step: str | None = None

    @property
    def done(self) -> bool:
        """True when the run has ended (completed, failed or cancelled)."""
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True, slots=True)
class Step:
    """One journal row: a step of a run and its recorded result.

    ``name`` is the journal key (``name``, or ``name:1`` for the second use of a
    name). ``status`` is ``completed`` or ``failed``, or ``retrying`` while a step
    between attempts waits for its backoff. For sleeps, ``completed_at`` is the
    wake-up time.
    """

    name: str
    kind: str
    status: str
    output: Any
    error: dict[str, Any] | None
    attempts: int
    started_at: datetime | None
    completed_at: datetime | None
    #: True for a row a retry superseded (history, never replayed)
    superseded: bool = False
    #: a flow run's step: its tasks (one, or one per element of a map), index order
    tasks: tuple[FlowTask, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowTask:
    """One task of a flow step (`Step.tasks`): a map step has one per element.

    ``status`` is a run status (``pending`` until claimed, ``waiting`` between
    attempts); ``attempts`` counts the attempts made so far; ``run_id`` is the task's
    own row (its audit trail holds every claim and retry)."""

    index: int
    status: str
    attempts: int
    output: Any
    error: dict[str, Any] | None
    run_id: str
    started_at: datetime | None
    completed_at: datetime | None


@dataclass(frozen=True, slots=True)
class Received:
    """What ``wait_for_event(name, event=[...])`` returns: which of the events came
    first, and its payload."""

    event: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's audit trail (created, claimed, step_completed, ...)."""

    type: str
    data: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """A workflow name with the number of runs in each status."""

    name: str
    counts: dict[str, int]


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker process as registered in the database."""

    id: str
    host: str
    pid: int
    workflows: tuple[str, ...]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next (None: no more)."""

    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Published:
    """What `App.publish` did: the runs it started and the waiting runs it resumed."""

    started: tuple[str, ...] = ()
    resumed: tuple[str, ...] = ()


# --------------------------------------------------------------------------- contract


@dataclass(frozen=True, slots=True)
class NewRun:
    """Parameters of `Backend.create_run`. Values are validated before they get here.

    Times: ``delay`` (seconds from the database's now) or an absolute ``run_at``;
    ``deadline_in`` (seconds from now) or an absolute ``deadline_at``. ``version``
    None: no process has registered the workflow; the first claim fixes it.
    """

    id: str
    workflow: str
    version: int | None
    input_json: str
    priority: int = 100
    idempotency_key: str | None = None
    delay: float = 0.0
    run_at: datetime | None = None
    deadline_in: float | None = None
    deadline_at: datetime | None = None
    retention_days: int = 30
    parent_id: str | None = None
    parent_step: str | None = None
    #: the W3C traceparent active where the run was started (its spans join that trace)
    traceparent: str | None = None
    # Flow control (perdure.limits): the run's lane, FIFO and rate-limit keys (None:
    # no limit applies), and a debounce key with its window in seconds.
    concurrency_key: str | None = None
    fifo_key: str | None = None
    rate_key: str | None = None
    debounce_key: str | None = None
    debounce: float | None = None
    #: a flow run's task keys, one (step, lane, FIFO key, rate key) per limited step
    #: whose key functions ran at start (`Backend.start_flow`; the others' tasks take
    #: `StepShape.keyless`)
    step_keys: tuple[tuple[str, str | None, str | None, str | None], ...] = ()

    @property
    def flow_controlled(self) -> bool:
        """Whether the start carries flow-control keys or a debounce (its claim, not
        its start, enforces them)."""
        keys = (self.concurrency_key, self.fifo_key, self.rate_key, self.debounce_key)
        return any(key is not None for key in keys)


@dataclass(frozen=True, slots=True)
class CreateResult:
    """Result of `Backend.create_run`: the run, whether this call created it, whether
    an existing run it returned has another input than the call gave, and what it
    leased to a worker of the starting process."""

    run: Run
    created: bool
    input_differs: bool = False
    #: what the call leased to the worker its ``claim`` named: the new run
    #: (`Backend.create_run`), or the flow run's first tasks (`Backend.start_flow`)
    claimed: tuple[Claim, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    """A workflow definition as registered in the database (for producers without code)."""

    name: str
    version: int
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimParams:
    """Parameters of `Backend.claim_runs`.

    ``workflows`` are the (name, version) pairs the worker can execute; only runs of
    those are claimed.
    """

    worker_id: str
    workflows: tuple[tuple[str, int], ...]
    limit: int
    lease_seconds: float
    #: The flow-control limits of the served workflows that declare any (by name).
    limits: tuple[WorkflowLimits, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkflowLimits:
    """A workflow's flow-control limits, as the limited claim enforces them.

    ``concurrency``: runs of the workflow ``running`` at once; ``key_concurrency``:
    per concurrency key; ``rate_limit`` / ``rate_period``: at most that many first
    claims (starts) per rate key in any ``rate_period`` seconds; ``fifo``: one run at
    a time per FIFO key, in start order. None: no such limit.
    """

    workflow: str
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    fifo: bool = False


@dataclass(frozen=True, slots=True)
class Schedule:
    """A cron schedule stored in the database (see `App.schedule`).

    ``next_at`` is the next tick not yet fired (UTC); ``input`` the JSON value
    (a dict or None) each tick's run gets, with ``scheduled_at`` added.
    """

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


@dataclass(frozen=True, slots=True)
class DeferParams:
    """Parameters of `Backend.defer_unavailable`.

    ``workflows`` are the (name, version) pairs the worker can execute; runs of those
    names with another version, due for at least ``grace_seconds``, are deferred.
    """

    worker_id: str
    workflows: tuple[tuple[str, int], ...]
    grace_seconds: float = 5.0
    limit: int = 100


@dataclass(frozen=True, slots=True)
class Wait:
    """A registered `wait_for_event` of a run that no signal has resolved yet."""

    key: str
    event: str
    match: Any
    timeout_at: datetime | None


@dataclass(frozen=True, slots=True)
class Claim:
    """A run claimed by a worker, with everything replay needs in one read.

    ``lease_token`` fences every later write for this claim. ``journal`` is in the
    order the rows were written. ``now`` is the database clock at claim time.
    ``claims_since_progress`` counts claims (this one included) since the run last
    committed anything; ``step_attempts`` counts every step attempt made so far.
    """

    run: Run
    lease_token: int
    journal: tuple[Step, ...]
    waits: tuple[Wait, ...]
    now: datetime
    claims_since_progress: int
    step_attempts: int
    recovered: bool = False
    #: why the run's stored data cannot be decoded (it then fails as PoisonRun)
    poison: str | None = None
    #: why this worker cannot open the run's sealed values (no codec, a wrong key): it
    #: parks the run for a worker that can (`Backend.park_undecodable`)
    undecodable: str | None = None
    #: the W3C traceparent stored at the run's start (`NewRun.traceparent`)
    traceparent: str | None = None
    #: the steps the body asked for, in the order it first asked (``"kind:key"``
    #: entries); empty for a run journaled before the call order was recorded
    call_order: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueGauge:
    """The database's gauges of one workflow with live runs (`Backend.queue_gauges`):
    runs ``running``, runs ``due`` (pending or waiting, claimable now), the seconds
    the oldest due run has waited (``claim_lag``; 0 when none is due), and the runs
    ``pending`` and ``waiting`` (due or not: a run parked for a week counts)."""

    workflow: str
    running: int
    due: int
    claim_lag: float
    pending: int
    waiting: int


@dataclass(frozen=True, slots=True)
class StepWrite:
    """A journal row to upsert as part of a `Transition`.

    A completed or failed row is final: writing a key that already holds a
    completed or failed row changes nothing (the stored row wins and is reported in
    `TransitionResult.existing`). A ``retrying`` row is replaced by any later write.
    ``completed_at=None`` means the database's now.
    """

    key: str
    kind: str
    status: str
    output_json: str | None = None
    error: dict[str, Any] | None = None
    attempts: int = 1
    started_at: datetime | None = None
    completed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EventWrite:
    """An audit-trail entry to add as part of a `Transition`."""

    type: str
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WaitWrite:
    """A `wait_for_event` to register as part of a parking `Transition`."""

    key: str
    event: str
    match_json: str | None = None
    timeout_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Park:
    """Outcome: park the run (status ``waiting``) until ``wake_at`` (None: only an event)."""

    reason: str
    wake_at: datetime | None = None
    #: stored as the run's error (a diverged run's `NonDeterminismError`); None keeps it
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Complete:
    """Outcome: the run completed with this (encoded) output."""

    output_json: str


@dataclass(frozen=True, slots=True)
class Fail:
    """Outcome: the run failed for good with this serialized error."""

    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Retry:
    """Outcome: the workflow body failed and runs again at ``wake_at`` (attempt + 1).

    ``reopen``: journal keys whose ``failed`` rows become ``retrying`` with 0 attempts,
    so the next attempt runs those steps again with a fresh step budget (their
    failures stay in the audit trail as ``step_failed`` events)."""

    wake_at: datetime
    error: dict[str, Any]
    reopen: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Release:
    """Outcome: give the run back (graceful stop); any worker may claim it at once."""


Outcome = Park | Complete | Fail | Retry | Release


@dataclass(frozen=True, slots=True)
class Transition:
    """Everything a worker commits for one claimed run, applied atomically and fenced.

    Applied only if the run is still ``running`` under ``lease_token``; otherwise
    nothing of it is written and the result says ``ok=False``.
    ``outcome=None`` keeps the run running and the lease held.
    """

    run_id: str
    lease_token: int
    steps: tuple[StepWrite, ...] = ()
    events: tuple[EventWrite, ...] = ()
    waits: tuple[WaitWrite, ...] = ()
    children: tuple[NewRun, ...] = ()
    step_attempts: int = 0
    outcome: Outcome | None = None
    #: Steps the body asked for first in this pass, in call order (``"kind:key"``),
    #: appended to the run's call order (`Claim.call_order`).
    asked: tuple[str, ...] = ()
    #: Claim on complete: when the transition completes a DAG-flow task, the same
    #: transaction leases up to ``claim.limit`` of the tasks it started (the steps
    #: that became ready) of ``claim.workflows`` to ``claim.worker_id`` (as
    #: `Backend.claim_runs` would), returned in `TransitionResult.claimed`; the
    #: wake-up for tasks handed over this way is not sent. Ignored otherwise.
    claim: ClaimParams | None = None


@dataclass(frozen=True, slots=True)
class TransitionResult:
    """The result of one `Transition`.

    ``ok`` is False when the lease was lost (nothing written). ``existing`` holds
    journal rows that already existed as completed or failed for keys the transition
    tried to write (a signal or another writer got there first): the stored row wins.
    ``failed`` is the error the run was failed with instead of the transition, when a
    layer in front of the database could not store it (a value too large once encoded).
    ``claimed`` are the tasks handed to the worker (`Transition.claim`): the caller
    must execute them (or release them) as it would claims of `Backend.claim_runs`.
    """

    ok: bool
    existing: tuple[Step, ...] = ()
    failed: dict[str, Any] | None = None
    #: the tasks leased to the worker by the transition's `Transition.claim`
    claimed: tuple[Claim, ...] = ()


@dataclass(frozen=True, slots=True)
class ListRunsParams:
    """Filters of `Backend.list_runs`; newest first; ``cursor`` is opaque."""

    workflow: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    input_match_json: str | None = None
    parent_id: str | None = None
    limit: int = 50
    cursor: str | None = None
    top_level: bool = False  # only runs without a parent
    idempotency_key: str | None = None  # of any workflow
    include_tasks: bool = False  # a flow's tasks too (else only with parent_id)


SignalOutcome = Literal["resolved", "buffered", "ended"]


@dataclass(frozen=True, slots=True)
class Notice:
    """A wake-up delivered by `Backend.listen`.

    kind ``wake``: work may be claimable (run_id if known); ``done``: the run ended;
    ``cancel``: the run was cancelled (the worker holding it should stop it);
    ``progress``: the run's history grew (only to listeners that asked for it).

    A ``done`` notice may say how the run ended: ``status`` (``completed``,
    ``failed``, ``cancelled``; None: read the run), the run's ``attempt`` at its end
    (a waiter whose read saw a later attempt knows the notice predates a retry), and
    ``outcome_json``, the output (completed) or error (failed) as stored JSON text when
    the notice could carry it.
    """

    kind: Literal["wake", "done", "cancel", "progress"]
    run_id: str | None = None
    status: Literal["completed", "failed", "cancelled"] | None = None
    attempt: int | None = None
    outcome_json: str | None = None


def waiting_data(park: Park, waits: tuple[WaitWrite, ...]) -> dict[str, Any]:
    """The data of a ``waiting`` event: the reason, the wake time, and the events the
    run waits for (what ``perdure runs show`` tells a user)."""
    data: dict[str, Any] = {
        "reason": park.reason,
        "wake_at": None if park.wake_at is None else park.wake_at.isoformat(),
    }
    events = sorted({w.event for w in waits if not w.event.startswith("~")})
    if events:
        data["events"] = events
    return data
