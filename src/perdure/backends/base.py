"""The storage contract: every storage behaviour as one typed async method.

Nothing above `perdure.backends` writes SQL or imports a driver. Each backend
(`postgres`, `sqlite`) implements this class, and one contract test suite
(`tests/contract/`) runs against every backend. The data model and state machine
are described in `docs/storage.md`.

Rules every implementation keeps:

* **Fencing.** Every write made on behalf of a claimed run (`apply`,
  `extend_leases`) checks the run's ``lease_token`` and ``status = 'running'`` in the
  same statement that writes; a mismatch writes nothing.
* **Database clock.** Leases, due times and deadlines are judged by the database's
  clock (Postgres ``perdure_now()``; the SQLite backend's own clock), never the
  caller's. That clock is real time plus an offset stored in the database
  (`clock_offset`, `set_clock_offset`), the same for every process on it.
* **Validation.** Values arrive validated and JSON arrives encoded (``*_json`` text);
  backends still reject what would corrupt the store (e.g. unknown status values).
* **Notices.** After a commit that makes work claimable (create, signal, publish,
  a park that is due at once, a child's end waking its parent) the backend
  notifies ``wake``; when a run ends it notifies ``done``; on cancel ``cancel`` and
  ``done``. Notices carry ids only, may be lost, and may be duplicated; polling is the
  source of truth.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from ..flows.definition import FlowShape
from ..records import (
    Claim,
    ClaimParams,
    CreateResult,
    DeferParams,
    Event,
    ListRunsParams,
    NewRun,
    Notice,
    Page,
    Published,
    QueueGauge,
    Run,
    Schedule,
    SignalOutcome,
    Step,
    Transition,
    TransitionResult,
    WorkerInfo,
    WorkflowRecord,
    WorkflowSummary,
)
from ..schedules import ScheduleSpec

__all__ = ["Backend", "NoticeCallback", "TransactionWork", "Unsubscribe", "deliver"]

log = logging.getLogger("perdure.backends")

NoticeCallback = Callable[[Notice], None]
Unsubscribe = Callable[[], Awaitable[None]]
#: The work of a transactional step (`Backend.transact`): given the connection of the
#: open transaction, it does the user's writes and returns the transition to apply.
TransactionWork = Callable[[Any], Awaitable[Transition]]


class Backend(abc.ABC):
    """One database, seen through the storage contract.

    A backend instance belongs to the event loop that opened it unless
    `shareable_across_loops` is True.
    """

    #: "postgres" or "sqlite"
    dialect: str
    #: True if one instance may be used from several event loops (threads).
    shareable_across_loops: bool = False

    # ------------------------------------------------------------------ lifecycle

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect. Does not migrate; call `migrate` for that."""

    @abc.abstractmethod
    async def migrate(self) -> int:
        """Apply pending migrations under a lock and return the schema version.

        Safe to call from many processes at once: exactly one applies each migration
        (Postgres: ``pg_advisory_xact_lock``; SQLite: ``BEGIN IMMEDIATE``), the others
        wait and then see the new version. Raises `SchemaVersionError` when the
        database is newer than this code.
        """

    @abc.abstractmethod
    async def check_schema(self) -> int:
        """What read-only mode does instead of `migrate`: return the schema version,
        changing nothing. Raises `SchemaVersionError` when the database has no perdure
        schema or one older than this code (`migrate` needs write access)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close connections and stop background tasks. Idempotent."""

    @abc.abstractmethod
    async def now(self) -> datetime:
        """The database clock (timezone-aware UTC): real time plus `clock_offset`."""

    @abc.abstractmethod
    async def clock_offset(self) -> float:
        """How far, in seconds, the database clock runs ahead of real time (0.0 until
        `set_clock_offset` moves it)."""

    @abc.abstractmethod
    async def set_clock_offset(self, seconds: float) -> None:
        """Move the database clock to real time plus ``seconds``, for every process and
        every backend instance on this database (PostgreSQL: this schema only), at once.

        Every due time, lease, deadline and retry backoff is judged by that clock, so
        moving it forward makes them due as real time passing would; a ``wake``
        notice (no run id) tells workers to look again. The offset is stored in the
        database and survives `migrate`. The clock never runs backwards: a negative
        offset, or one smaller than the current one, raises `ValidationError`, as
        does an offset of more than 100 years. Meant for tests
        (`perdure.testing.TestEnvironment`), not production.
        """

    # ------------------------------------------------------------------ registry

    @abc.abstractmethod
    async def register_workflows(self, workflows: Sequence[WorkflowRecord]) -> None:
        """Upsert workflow definitions (name, version, options) into the registry."""

    @abc.abstractmethod
    async def get_workflow(self, name: str, version: int | None = None) -> WorkflowRecord | None:
        """A registered definition: that version, or the highest when ``version`` is None."""

    # ------------------------------------------------------------------ flows

    @abc.abstractmethod
    async def register_flows(self, shapes: Sequence[FlowShape]) -> None:
        """Store flow shapes (flows, steps, dependencies), each fixed per version: a
        shape stored already is left as it is; a different shape under a stored
        (name, version) raises `ValidationError` (a changed flow needs a new version)."""

    @abc.abstractmethod
    async def get_flow(self, name: str, version: int | None = None) -> FlowShape | None:
        """A stored shape: that version, or the highest when ``version`` is None."""

    @abc.abstractmethod
    async def start_flow(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        """Start a run of a stored flow (``new.version`` None: its highest), as
        `create_run` does (ids and idempotency keys alike), in one transaction: the run
        (kind ``flow``, status ``running``, never claimed itself), one state per step,
        and the tasks of the ready steps (kind ``task``, workflow ``<flow>:<step>``,
        parent the flow run, claimable now through `claim_runs`). Maps over an empty
        list complete at once with ``[]``; a map over a non-list fails the run naming
        the step; a flow whose steps all completed at once completes. When a task ends
        (through `apply`, or cancelled), the same transaction records it: a completed
        task's step completes when all its tasks did (a map's output is the list in
        element order), the steps whose dependencies all completed get their tasks,
        and the run completes with ``{leaf step: output}``; a failed task fails the
        run (error type ``StepFailed`` naming the step) and cancels its live tasks.
        With ``claim``, up to ``claim.limit`` of the tasks this call starts, of
        ``claim.workflows``, are leased to ``claim.worker_id`` in the same transaction,
        as claim on complete leases them (`Transition.claim`), and returned in
        ``result.claimed``; the wake notice goes out only if tasks remain unclaimed.
        `ValidationError` if no such flow is stored."""

    # ------------------------------------------------------------------ producers

    @abc.abstractmethod
    async def create_run(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        """Insert a run (status ``pending``) and its ``created`` event; notify ``wake``.

        With ``claim`` (a worker of the starting process took the start): a run this
        call creates is leased to ``claim.worker_id`` for ``claim.lease_seconds`` in the
        same transaction, as `claim_runs` leases one (status ``running``, a new token,
        ``started_at``, ``claims_since_progress`` 1, a ``claimed`` event after
        ``created``), without a ``wake`` notice, and returned in ``result.claimed``. A
        start under flow control (`NewRun.flow_controlled`) is never leased: the claim
        enforces its limits.

        With an id or (workflow, idempotency key) that already exists, return the
        existing run with ``created=False`` (also under concurrent calls: exactly one
        insert wins); if its input differs from ``new.input_json`` (compared as JSON
        values), record a ``duplicate_start`` event on it and say so in
        ``input_differs``. An id that names a run of
        another workflow raises `ValidationError`. ``new.version`` None (no process
        registered the workflow) is stored as is; `claim_runs` fixes it.
        """

    @abc.abstractmethod
    async def cancel_run(self, run_id: str, rollback: bool = False) -> bool:
        """Cancel a live run and, recursively, its live children (as `apply` does for
        the children of a run that fails).

        With ``rollback`` and a completed step in its journal, the run is handed to a
        rollback pass instead: status ``waiting``, claimable now, its lease cleared
        (the worker holding it is fenced out and told ``cancel``), its ``error`` set to
        ``{"type": "WorkflowCancelled", "rollback": true, ...}``, its waits and
        buffered signals deleted, its live children cancelled, and a ``cancelling``
        event; the worker that claims it runs the rollbacks, then cancels it.

        Sets status ``cancelled`` and ``completed_at``, clears the lease, deletes its
        waits and buffered signals, records a ``cancelled`` event, notifies ``cancel``
        and ``done``. If the run has a live parent that is not itself being
        cancelled, the parent's journal row ``parent_step`` is written as failed
        (error type ``WorkflowCancelled``) and the parent becomes claimable now.
        Returns False (and writes nothing) if the run had already ended.
        Raises `RunNotFound` if there is no such run.
        """

    @abc.abstractmethod
    async def deliver_signal(
        self, run_id: str, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> SignalOutcome:
        """Deliver a signal to one run, in one transaction.

        With an ``idempotency_key`` the run already received, deliver nothing and
        return what that delivery returned.

        * ``resolved``: a registered wait of the run on ``event`` whose match the
          payload contains (oldest wait first) gets a completed journal row (kind
          ``wait``, output = payload), the wait is deleted, a ``signaled`` event is
          recorded and the run becomes claimable now (``wake`` notice) unless it is
          running.
        * ``buffered``: the run is live but not waiting on a matching wait: the signal
          is stored, oldest first, for the run's next matching wait.
        * ``ended``: the run is terminal; nothing is stored.

        Raises `RunNotFound` if there is no such run.
        """

    @abc.abstractmethod
    async def publish(
        self, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> Published:
        """Resolve every registered wait on ``event`` whose match the payload
        contains (as `deliver_signal` does, one per run) and start one run of every
        workflow subscribed to a pattern matching ``event`` (highest registered
        version, input = payload). Nothing is buffered. With an ``idempotency_key``
        already used, return the first call's result and do nothing.
        """

    @abc.abstractmethod
    async def subscribe_topic(self, pattern: str, workflow: str) -> bool:
        """Add a durable subscription; False if it already existed."""

    @abc.abstractmethod
    async def unsubscribe_topic(self, pattern: str, workflow: str) -> bool:
        """Remove a subscription; False if there was none."""

    @abc.abstractmethod
    async def list_subscriptions(self) -> list[tuple[str, str]]:
        """All (pattern, workflow) subscriptions, sorted."""

    # ------------------------------------------------------------------ operations

    @abc.abstractmethod
    async def retry_run(self, run_id: str, from_step: str | None, by: str) -> Run:
        """Resume a failed or cancelled run under its id: the journal rows from
        ``from_step`` on (None: from the first failed row, if any) and every rollback
        row are superseded (kept as history, never replayed); the run is pending again
        with ``attempt + 1``; a ``retried`` event records ``by`` and what was
        superseded. `RunNotFound`; `RunStateError` for a live run; `ValidationError`
        for a step the journal does not hold."""

    @abc.abstractmethod
    async def fork_run(
        self,
        source_id: str,
        new_id: str,
        before_step: str | None,
        input_json: str | None,
        version: int | None,
        by: str,
    ) -> Run:
        """A new pending run ``new_id`` of the source's workflow (its version unless
        ``version``; its input unless ``input_json``) whose journal is a copy of the
        source's final rows before ``before_step`` (None: all of them). The source is
        untouched; the new run's ``created`` event names it. `RunNotFound`;
        `ValidationError` for a step the source's journal does not hold."""

    # ------------------------------------------------------------------ reads

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> Run | None:
        """The run, or None."""

    @abc.abstractmethod
    async def list_runs(self, params: ListRunsParams) -> Page[Run]:
        """Runs matching the filters, at most ``params.limit``, newest first by the
        database's ``created_at`` with the id breaking ties; ``params.cursor`` (the
        ``next_cursor`` of a previous page) continues after that page, never skipping
        or repeating a run (a malformed cursor raises `ValidationError`).

        ``since``/``until`` bound ``created_at`` (inclusive/exclusive);
        ``input_match_json`` keeps runs whose input contains it (JSON containment,
        Postgres ``@>`` semantics). ``next_cursor`` is None on the last page.
        """

    @abc.abstractmethod
    async def get_steps(self, run_id: str, include_superseded: bool = False) -> list[Step]:
        """The run's journal in write order (empty if the run does not exist); for a
        flow run, one `Step` per flow step in definition order (kind ``flow-task``,
        status ``created``/``started``/``completed``/``failed``/``cancelled``, its
        tasks in `Step.tasks`, ``attempts`` summed over them); with
        ``include_superseded``, the rows retries superseded too (``superseded=True``),
        all in the order they were first written."""

    @abc.abstractmethod
    async def get_call_order(self, run_id: str) -> tuple[str, ...]:
        """The steps the run's body asked for, in the order it first asked, as
        ``"kind:key"`` entries (`Claim.call_order`); empty for a run journaled before
        call orders were recorded, or no such run."""

    @abc.abstractmethod
    async def get_events(self, run_id: str) -> list[Event]:
        """The run's audit trail, oldest first. Completed journal rows appear as
        ``step_completed`` events (data ``{"step", "kind"}``) at their write time."""

    @abc.abstractmethod
    async def workflow_summaries(self) -> list[WorkflowSummary]:
        """Every workflow name that is registered or has runs, with run counts per
        status (all six statuses present, zeros included), sorted by name."""

    # ------------------------------------------------------------------ workers

    @abc.abstractmethod
    async def register_worker(self, info: WorkerInfo) -> None:
        """Upsert a worker row (its ``last_seen_at`` is set to the database's now)."""

    @abc.abstractmethod
    async def deregister_worker(self, worker_id: str) -> None:
        """Mark a worker stopped (``stopped_at`` = now)."""

    @abc.abstractmethod
    async def list_workers(self, seen_within: float) -> list[WorkerInfo]:
        """Workers seen within the last ``seen_within`` seconds, newest first."""

    @abc.abstractmethod
    async def claim_runs(self, params: ClaimParams) -> list[Claim]:
        """Claim up to ``params.limit`` due runs in one transaction.

        Due: status ``pending``, ``waiting`` or ``running`` (an expired lease), with
        ``available_at <= now``, and (workflow, version) among ``params.workflows``,
        or a run without a version whose workflow is among them (it takes the highest
        version of its name there);
        lowest ``priority`` first, then oldest ``available_at``. Concurrent claimers
        never get the same run (``FOR UPDATE SKIP LOCKED`` / ``BEGIN IMMEDIATE``).

        Each claimed run: status ``running``, a new ``lease_token`` (64 random bits),
        ``lease_owner`` = worker, lease and ``available_at`` = now + lease,
        ``started_at`` set if unset, ``wake_reason`` cleared,
        ``claims_since_progress`` + 1; a ``claimed`` event (preceded by
        ``lease_expired`` if it was ``running``). Returns each with its journal and
        open waits, read in the same transaction.
        """

    @abc.abstractmethod
    async def extend_leases(
        self, worker_id: str, held: Sequence[tuple[str, int]], lease_seconds: float
    ) -> set[str]:
        """Renew the leases of the (run id, lease token) pairs still held (status
        ``running`` and same token): lease and ``available_at`` = now + lease. Also
        touches the worker's ``last_seen_at``. Returns the ids still held; the caller
        must abandon the others (lost, cancelled or taken over)."""

    @abc.abstractmethod
    async def release_orphans(self, worker_id: str, held: Sequence[str]) -> int:
        """Make every run leased to ``worker_id`` but not in ``held`` claimable now.

        A claim whose answer was lost (the connection died after the database
        committed it) leaves runs leased to a worker that does not know it holds
        them; the worker calls this once the database answers again, so those runs
        do not wait for their lease to expire. Their next claim logs
        ``lease_expired``. Returns how many runs were released."""

    @abc.abstractmethod
    async def handed_at_start(self, run_id: str, worker_id: str) -> tuple[Claim, ...]:
        """For a start whose answer was lost (`create_run` or `start_flow` with a
        claim, run ``run_id`` new): what it leased to ``worker_id`` if it committed,
        still under that lease and untouched since its creation (the run, or a flow
        run's first tasks), as claims for the worker to start now."""

    @abc.abstractmethod
    async def apply(self, transitions: Sequence[Transition]) -> list[TransitionResult]:
        """Apply transitions of claimed runs in one database transaction.

        Each transition is all-or-nothing and fenced on (``run_id``, ``lease_token``,
        status ``running``); one that fails the fence writes nothing and gets
        ``ok=False`` without affecting the others. Results are in input order.

        A transition, in order: upserts its journal rows (see `StepWrite`; writing a
        key deletes the run's wait on that key), adds its events, adds
        ``step_attempts`` to the run's counter, resets ``claims_since_progress`` to 0,
        inserts ``children`` (as `create_run` would, with ``parent_id`` set), then
        applies the outcome:

        * None: the run stays ``running`` under the lease.
        * `Park`: status ``waiting``, lease cleared, ``wake_reason`` = reason, waits
          registered (an existing wait on the same key is kept). ``available_at`` =
          earliest of ``wake_at``, the waits' timeouts and ``deadline_at`` (infinity
          if none), or now if a registered wait is already satisfiable: a buffered
          signal matches it (the oldest is consumed into a completed journal row) or
          its key already has a journal row. A ``waiting`` event is recorded.
        * `Complete` / `Fail`: status ``completed``/``failed``, output/error and
          ``completed_at`` set, lease cleared, waits and buffered signals deleted,
          ``completed``/``failed`` event, ``done`` notice. A failed run's live
          descendants are cancelled (as `cancel_run` does, event data ``{"by": id}``).
          If the run has a parent, the
          parent's journal row ``parent_step`` (kind ``child``) is written with the
          output (or, failed, status ``failed`` with the child's error plus
          ``"run_id": child id``) and the parent becomes claimable now (unless it is
          running).
        * `Retry`: status ``waiting``, ``wake_reason`` ``retry``, ``attempt`` + 1,
          ``error`` = the error, ``available_at`` = the earlier of ``wake_at`` and
          ``deadline_at`` (so a long backoff cannot outlive the deadline), lease
          cleared.
        * `Release`: lease cleared and claimable now, status ``waiting``, no wake reason.

        Claim on complete: a transition with ``claim`` set that completes a DAG-flow
        task then leases, in the same transaction, up to ``claim.limit`` of the tasks
        that completion started (of the steps that became ready) whose (workflow,
        version) is in ``claim.workflows`` to ``claim.worker_id``, exactly as
        `claim_runs` does (new lease token, lease expiry, ``claimed`` event), and
        returns them in ``TransitionResult.claimed``. The flow run's ``wake`` notice
        is sent only if some of the tasks it started were not handed over. Any other
        transition ignores ``claim``.
        """

    @abc.abstractmethod
    async def transact(self, work: TransactionWork) -> TransitionResult:
        """Run ``work`` inside a transaction and apply the transition it returns in that
        same transaction: the writes ``work`` made and the transition commit together
        or not at all (transactional steps).

        ``work(connection)`` gets the connection of the open transaction: PostgreSQL, a
        psycopg ``AsyncConnection`` on the application's database with its own search
        path (not perdure's schema), awaited on the caller's event loop; SQLite, the
        backend's ``sqlite3.Connection`` inside ``BEGIN IMMEDIATE``, run on the
        backend's thread under a private event loop (the connection belongs to that
        thread). ``work`` must neither commit nor roll back; a ``work`` that raises
        rolls everything back and its exception propagates unchanged.

        The transition is fenced as in `apply`: when the fence fails, everything is
        rolled back and the result has ``ok=False``. When a journal key it writes
        already held a final row, everything is rolled back too and the result has
        ``ok=True`` with that row in ``existing`` (the stored row wins).
        """

    @abc.abstractmethod
    async def defer_unavailable(self, params: DeferParams) -> list[str]:
        """Park runs that no worker with their version has claimed.

        Due runs (as `claim_runs` judges them, but due since at least
        ``params.grace_seconds``) whose workflow name is among ``params.workflows``
        but whose (name, version) pair is not, at most ``params.limit``: status
        ``waiting``, ``wake_reason`` ``version``, lease cleared, ``available_at`` = now
        + min(300, 5 * 2**n) seconds where n counts the run's earlier
        ``version_unavailable`` events, and a ``version_unavailable`` event (data:
        worker, version, retry_in). Never fails a run. Returns the deferred ids.
        """

    @abc.abstractmethod
    async def park_undecodable(
        self, run_id: str, lease_token: int, worker_id: str, reason: str
    ) -> datetime | None:
        """Park a claimed run whose sealed values this worker cannot open (no codec, or
        a key that does not open them), so a worker that can read it takes it later.

        Fenced as `apply` is (``run_id``, ``lease_token``, status ``running``): status
        ``waiting``, ``wake_reason`` ``undecodable``, lease cleared,
        ``claims_since_progress`` 0 (parking is not a crash), ``available_at`` = now +
        min(300, 5 * 2**n) seconds where n counts the run's earlier ``undecodable``
        events, and an ``undecodable`` event (data: worker, reason, retry_in). Nothing
        else changes: journal, waits and input stay as they are. Never fails a run.
        Returns the new ``available_at``, or None when the fence failed.
        """

    @abc.abstractmethod
    async def next_wake_at(self, workflows: Sequence[tuple[str, int]]) -> datetime | None:
        """The earliest ``available_at`` of any pending/waiting/running run of these
        (workflow, version) pairs, or None (nothing scheduled)."""

    # ------------------------------------------------------------------ maintenance

    @abc.abstractmethod
    async def sweep(self, max_retention_days: int, limit: int = 1000) -> int:
        """Delete up to ``limit`` terminal runs whose ``completed_at`` +
        min(``retention_days``, ``max_retention_days``) days is past; their journal,
        events, waits and signals go with them. Never touches live runs. Returns how
        many runs were deleted."""

    @abc.abstractmethod
    async def queue_gauges(self) -> list[QueueGauge]:
        """Per workflow with live runs: how many run, how many are due for a claim, how
        long the oldest due one has waited, and how many are pending and waiting (the
        metrics' database gauges)."""

    # ------------------------------------------------------------------ schedules

    @abc.abstractmethod
    async def put_schedule(self, spec: ScheduleSpec, next_at: datetime) -> Schedule:
        """Store a schedule. A new one (or one whose cron, time zone or workflow
        changed) gets ``next_at``; an unchanged one keeps its next tick and its
        paused state; input and catch-up are always updated."""

    @abc.abstractmethod
    async def get_schedule(self, name: str) -> Schedule | None:
        """One schedule, or None."""

    @abc.abstractmethod
    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name."""

    @abc.abstractmethod
    async def pause_schedule(self, name: str, paused: bool, next_at: datetime | None) -> bool:
        """Pause or resume a schedule (resuming a paused one sets ``next_at``, so ticks
        that passed while it was paused are skipped; resuming an active one changes
        nothing). False if there is no such schedule."""

    @abc.abstractmethod
    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; False if there was none."""

    @abc.abstractmethod
    async def due_schedules(self, limit: int = 100) -> list[Schedule]:
        """Schedules not paused whose ``next_at`` is past by the database clock,
        earliest first."""

    @abc.abstractmethod
    async def advance_schedule(
        self, name: str, from_at: datetime, to_at: datetime, fired_at: datetime | None
    ) -> bool:
        """Move a schedule's ``next_at`` from ``from_at`` to ``to_at`` (and record
        ``fired_at`` as its last fired tick when given) only if it is still
        ``from_at`` and not paused: of processes firing the same ticks, one advances."""

    # ------------------------------------------------------------------ notices

    @abc.abstractmethod
    async def watch_run(self, run_id: str, watcher: str, seconds: float | None) -> None:
        """Mark ``run_id`` as watched by ``watcher`` for the next ``seconds`` (None:
        not any more): transitions of a watched run send ``progress`` notices, which
        other runs do not pay for. A backend whose notices cost nothing may ignore it."""

    @abc.abstractmethod
    async def listen(
        self, callback: NoticeCallback, *, ends: bool = True, progress: bool = False
    ) -> Unsubscribe:
        """Call ``callback`` (on the subscriber's event loop) for every notice from
        any process using this database (SQLite: this process only); with
        ``progress``, also for every transition of a live run (``progress`` notices,
        which only such listeners receive). ``ends=False`` says the subscriber has no
        use for ``done`` notices: a backend may then spare it (and its process) the
        one every run's end sends. Returns an async function that unsubscribes."""


def deliver(callbacks: Sequence[NoticeCallback], notices: Sequence[Notice]) -> None:
    """Hand each notice to each callback; a callback that fails is logged, never raised
    into the backend that delivers."""
    for callback in callbacks:
        for notice in notices:
            try:
                callback(notice)
            except Exception:
                log.exception("notice callback %r failed", callback)
