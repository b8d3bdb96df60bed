"""App: the workflow registry and the client, over one database.

Every client method has an ``*_async`` twin that holds the logic; the sync method is
a one-line call of the twin through a private event-loop thread (the portal).

Backends and event loops: a PostgreSQL backend (its connection pool) belongs to the
event loop that opened it, so the app opens one per loop that uses it (the portal's
loop for sync calls, the caller's loop for ``*_async`` calls, each worker's loop).
The SQLite backend works from any loop and is shared. `App.close` closes them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, overload

from ._connections import Connections
from ._end_waiters import RunEndWait
from ._portal import Portal
from ._reads import ended_as
from ._recovery import Recovery
from ._schedule_client import ScheduleClient
from ._steering import Steering
from .backends.base import Backend
from .codec import Codec, check_codec
from .durations import Duration, to_seconds
from .errors import (
    ConfigurationError,
    ReadOnlyDatabase,
    ValidationError,
)
from .flows.definition import FlowShape
from .flows.dsl import Flow
from .handle import RunHandle
from .ids import new_run_id
from .limits import KeyFn, flow_control
from .names import WorkflowRef, workflow_name
from .records import (
    NewRun,
)
from .redaction import Redaction
from .retry import RetryPolicy
from .serialization import encode
from .settings import Settings
from .telemetry.tracing import current_traceparent
from .validation import check_id, check_int, check_time
from .worker import Worker
from .worker.handoff import LocalStarts
from .workflow import Body, Registry, define_workflow

__all__ = ["App"]

F = TypeVar("F", bound=Body)


log = logging.getLogger("perdure")


class App(Recovery, Steering, ScheduleClient):
    """A perdure application: register workflows, start and watch runs, run workers.

    Args:
        database_url: ``sqlite:///path.db`` or ``postgresql://user@host/db``. Default:
            ``PERDURE_DATABASE_URL``, else ``sqlite:///perdure.db`` in the current
            directory.
        schema: the PostgreSQL schema (default ``PERDURE_SCHEMA`` or ``perdure``).
        migrate: apply the schema migrations when the app first touches the database
            (default True; see also ``perdure migrate``).
        codec: encodes every stored input, output and payload (e.g.
            `perdure.codec.FernetCodec` to encrypt them); see docs/security.md.
        redact: keys whose values the server, the CLI and the logs mask (``"password"``,
            ``"card.*"``: dotted paths, ``*`` matching any one key); stored values are
            untouched. See docs/security.md.
        step_retry: the `RetryPolicy` of every step that gives none (a workflow's own
            ``step_retry`` wins). Default: 3 attempts, exponential 1s→60s.
        **settings: overrides of `perdure.settings.Settings` fields (``read_only=True``
            opens the database read-only: reads work, writes raise `ReadOnlyDatabase`).
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        migrate: bool = True,
        codec: Codec | None = None,
        redact: Iterable[str] | None = None,
        step_retry: RetryPolicy | None = None,
        **settings: Any,
    ) -> None:
        if step_retry is not None and not isinstance(step_retry, RetryPolicy):
            raise ValidationError("step_retry must be a perdure.RetryPolicy")
        #: The policy of every step that gives none, in workflows that give none.
        self.step_retry = step_retry
        self.settings = Settings.load(database_url, schema=schema, **settings)
        #: The payload codec (None: values are stored as they are); see perdure.codec.
        self.codec = None if codec is None else check_codec(codec)
        #: Masks the configured keys in what the server, the CLI and the logs show.
        self.redaction = Redaction(redact)
        self._registry = Registry()
        self._portal = Portal()
        self._local_starts = LocalStarts()  # this app's workers serving in this process
        self._connections = Connections(
            self.settings, self._registry, migrate=migrate, codec=self.codec
        )

    def __repr__(self) -> str:
        from .backends import redact_url

        return f"<perdure.App {redact_url(self.settings.database_url)}>"

    # ------------------------------------------------------------------ registration

    @overload
    def workflow(self, fn: F, /) -> F: ...

    @overload
    def workflow(
        self,
        /,
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
    ) -> Callable[[F], F]: ...

    def workflow(
        self,
        fn: Any = None,
        /,
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
    ) -> Any:
        """Register an ``async def body(ctx, input)`` as a workflow (bare or with options).

        Args:
            name: the workflow's name; default: the function's name.
            version: runs keep the version they started with; new runs get the highest.
            retention: how long finished runs are kept ("30d"; an int is days). Default 30 days.
            retry: workflow-level `RetryPolicy` (reruns the body from its last committed
                step). Default: one attempt.
            step_retry: the `RetryPolicy` of every step of this workflow that gives
                none (a step's own ``retry=`` wins); default: the app's ``step_retry``.
                Rollbacks use their step's policy unless given ``rollback_retry=``.
            deadline: the run fails with DeadlineExceeded this long after it starts.
            priority: lower numbers are claimed first. Default 100.
            on: topic patterns (``"user.*"``) whose published events start this workflow.
            schedule: a cron expression (``"0 9 * * MON-FRI"``): a schedule named after
                the workflow, stored when the app opens (see `schedule`).
            timezone: the IANA zone the schedule is read in. Default UTC.
            concurrency: at most this many runs of it ``running`` at once.
            concurrency_key: a function of the input (as JSON) giving the run's key, with
                ``key_concurrency``: at most that many running per key. Runs of equal
                priority are claimed round-robin across keys.
            rate_limit: ``"100/m"``: at most that many runs start in any such window
                (per ``rate_limit_key`` of the input, if given).
            fifo_key: a function of the input: runs with the same key run one at a
                time, in start order.
            on_divergence: what a run does when its replay no longer matches its
                journal (the code changed under it, see docs/versioning.md):
                ``"park"`` (default) waits, retried with backoff, until code that
                replays it cleanly comes back; ``"fail"`` fails it.

        Keys are computed once, at start (see docs/limits.md).

        The function is returned unchanged (it can still be called directly in tests).
        """

        def register(body: F) -> F:
            definition = define_workflow(
                body,
                name=name,
                version=version,
                retention=retention,
                retry=retry,
                step_retry=step_retry if step_retry is not None else self.step_retry,
                deadline=deadline,
                priority=priority,
                on=on,
                schedule=schedule,
                timezone=timezone,
                concurrency=concurrency,
                concurrency_key=concurrency_key,
                key_concurrency=key_concurrency,
                rate_limit=rate_limit,
                rate_limit_key=rate_limit_key,
                fifo_key=fifo_key,
                on_divergence=on_divergence,
            )
            definition = replace(
                definition,
                retention_days=min(definition.retention_days, self.settings.max_retention_days),
            )
            self._registry.add(definition)
            body.__perdure_name__ = definition.name  # type: ignore[attr-defined]
            return body

        return register(fn) if fn is not None else register

    def flow(
        self,
        name: str,
        *,
        version: int = 1,
        max_attempts: int = 3,
        base_delay: float = 1.0,
        timeout: float = 60.0,
        max_tasks: int = 10_000,
    ) -> Flow:
        """A DAG flow (DESIGN §6): add steps with ``@flow.step`` / ``@flow.map``.

        Args:
            name: the flow's name (a workflow name: no workflow may have it too).
            version: the shape is fixed per version; a run keeps the shape it started
                with, and a changed shape needs a new version.
            max_attempts: attempts of each task (a step may override it). Default 3.
            base_delay: seconds; a failed attempt n is retried after
                ``base_delay * 2**n``. Default 1.
            timeout: seconds a task may run before it counts as failed (and is
                retried). Default 60.
            max_tasks: the most tasks a map step may create (a step may set its own);
                a longer list fails the run, with none of its tasks. Default 10,000.

        Raises:
            ConfigurationError: the app has a payload codec. A flow's database rules
                read its values (a map's list, the step inputs they assemble), which a
                codec hides from them; flows and codecs do not combine yet.
        """
        if self.codec is not None:
            raise ConfigurationError(
                f"flow {name!r}: flows cannot be used with a payload codec yet (the "
                "database assembles step inputs and splits maps, so it must read the values)"
            )
        flow = Flow(
            name,
            version=version,
            max_attempts=max_attempts,
            base_delay=base_delay,
            timeout=timeout,
            max_tasks=max_tasks,
            on_change=self._registry.changed,
        )
        self._registry.add_flow(flow)
        return flow

    def worker(
        self,
        *,
        concurrency: int = 10,
        workflows: Iterable[str] | str | None = None,
        lease: Duration = "30s",
        poll_interval: Duration | None = None,
        shutdown_timeout: Duration | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> Worker:
        """A worker for this app's workflows; see `perdure.worker.Worker`
        (``metrics_port``: serve Prometheus metrics, see docs/telemetry.md)."""
        if self.settings.read_only:
            raise ReadOnlyDatabase("this app is read-only: a worker writes", opened_read_only=True)
        return Worker(
            self._registry,
            self._connections,
            self.settings,
            concurrency=concurrency,
            workflows=workflows,
            lease=lease,
            poll_interval=poll_interval,
            shutdown_timeout=shutdown_timeout,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            local_starts=self._local_starts,
            portal=self._portal,
        )

    # ------------------------------------------------------------------ backends

    async def _backend(self) -> Backend:
        return await self._connections.backend()

    async def close_async(self) -> None:
        """Close the database connections this loop (and the shared backend) holds."""
        await self._connections.close_async()

    def close(self) -> None:
        """Close every database connection of the app and stop its portal thread."""
        if self._portal.loop is not None:
            self._portal.call(self.close_async)
        self._connections.close_others()
        self._portal.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close_async()

    # ------------------------------------------------------------------ starting runs

    async def _resolve(
        self, workflow: WorkflowRef, version: int | None
    ) -> tuple[str, int | None, dict[str, Any], bool]:
        """Name, version, options and whether some process registered the workflow.

        A workflow no process has registered is accepted (producers never depend on
        workers): the version stays as given (None: the claiming worker's highest)."""
        name = workflow_name(workflow)
        if version is not None:
            check_int(version, "version", minimum=1)
        definition = self._registry.get(name, version)
        if definition is not None:
            return definition.name, definition.version, definition.options(), True
        record = await (await self._backend()).get_workflow(name, version)
        if record is None:
            return name, version, {}, False
        return record.name, record.version, record.options, True

    async def _flow_to_start(self, workflow: WorkflowRef, version: int | None) -> FlowShape | None:
        """The stored shape when ``workflow`` names a flow (this app's, or one only the
        database knows, defined by another process or in SQL), else None."""
        name = workflow_name(workflow)
        if self._registry.get(name) is not None:
            return None
        if version is not None:
            check_int(version, "version", minimum=1)
        local = self._registry.flow(name, version)
        if local is not None:
            return local.shape
        if self._registry.flow(name) is not None and version is not None:
            raise ValidationError(f"flow {name!r} has no version {version}")
        return await (await self._backend()).get_flow(name, version)

    async def start_async(
        self,
        workflow: WorkflowRef,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        deadline: Duration | datetime | None = None,
        version: int | None = None,
        retention_days: int | None = None,
        run_id: str | None = None,
        debounce_key: str | None = None,
        debounce: Duration | None = None,
    ) -> RunHandle:
        """Start a run: one committed insert; it will run whether or not a worker is up.

        A workflow no process has registered yet is accepted: the run stays pending
        until a worker that serves the name claims it (``handle.warning`` says so).

        Args:
            workflow: the decorated function or the workflow's name.
            input: the run's input, a JSON value (dataclasses/pydantic models become dicts).
            idempotency_key: the same key (per workflow) returns the existing run
                (``handle.created`` False) whatever its input, never a second one; a
                differing input is logged and recorded as a ``duplicate_start`` event.
                It follows the character rule of ``run_id``.
            priority: lower numbers are claimed first (default: the workflow's, else 100).
            delay: start no earlier than this long from now.
            run_at: start no earlier than this (timezone-aware) time.
            deadline: a duration from now or an aware datetime; past it the run fails
                with DeadlineExceeded (default: the workflow's deadline).
            version: run this version instead of the highest registered one.
            retention_days: keep the finished run this many days (capped by
                ``PERDURE_MAX_RETENTION_DAYS``).
            run_id: the run's id (default a new ULID): 1-255 characters, none of '/',
                '\\', '?', '#', '%' or a control character, and not '.' or '..' (so
                every id can be addressed in a URL; docs/limits.md). Starting with an
                id that exists returns that run, like an idempotency key.
            debounce_key: with ``debounce`` (a duration): while a run started with this
                key is still pending, a start with the same key gives it this input
                and pushes it back by ``debounce``, and returns its handle; one run
                executes, with the last input.

        Returns:
            A `RunHandle`.
        """
        new_id = new_run_id() if run_id is None else check_id(run_id, "run_id")
        flow = await self._flow_to_start(workflow, version)
        name, resolved_version, options, registered = (
            (flow.name, flow.version, {}, True)
            if flow is not None
            else await self._resolve(workflow, version)
        )
        input_json = encode(
            input, what=f"the input of workflow {name!r}", max_bytes=self.settings.max_payload_bytes
        )
        key = None if idempotency_key is None else check_id(idempotency_key)
        prio = options.get("priority", 100) if priority is None else check_int(priority, "priority")
        if delay is not None and run_at is not None:
            raise ValidationError("pass either delay or run_at, not both")
        delay_s = 0.0 if delay is None else to_seconds(delay, what="delay")
        at = None if run_at is None else check_time(run_at, "run_at")
        deadline_in: float | None = None
        deadline_at: datetime | None = None
        if isinstance(deadline, datetime):
            deadline_at = check_time(deadline, "deadline")
        elif deadline is not None:
            deadline_in = to_seconds(deadline, what="deadline")
        elif options.get("deadline_seconds") is not None:
            deadline_in = float(options["deadline_seconds"])
        if retention_days is None:
            retention = int(options.get("retention_days", 30))
        else:
            retention = check_int(retention_days, "retention_days", minimum=0)
        retention = min(retention, self.settings.max_retention_days)
        new = NewRun(
            id=new_id,
            workflow=name,
            version=resolved_version,
            input_json=input_json,
            priority=prio,
            idempotency_key=key,
            delay=delay_s,
            run_at=at,
            deadline_in=deadline_in,
            deadline_at=deadline_at,
            retention_days=retention,
            traceparent=current_traceparent(),
        )
        if flow is not None and (
            delay_s
            or at is not None
            or deadline_in is not None
            or deadline_at is not None
            or debounce_key is not None
            or debounce is not None
        ):
            raise ValidationError(
                f"{name!r} is a DAG flow, whose runs start at once: delay, run_at, deadline "
                "and debounce are for workflows"
            )
        local_flow = None if flow is None else self._registry.flow(flow.name, flow.version)
        if local_flow is not None:  # its limited steps' task keys, from this input
            new = replace(new, step_keys=local_flow.step_keys(input_json))
        if flow is None and (debounce_key is not None or debounce is not None or registered):
            definition = self._registry.get(name, resolved_version)
            limits = None if definition is None else definition.limits
            new = flow_control(new, limits, debounce_key, debounce, options)
        backend = await self._backend()
        # Handed to a worker of this app in this process when one has a free slot.
        result = await self._local_starts.create(
            backend, new, flow is not None, fresh=run_id is None
        )
        warning = None
        if not registered and result.run.version is None:
            warning = (
                f"no process has registered workflow {name!r} yet: the run waits until a "
                "worker that serves it starts"
            )
            log.info("run %s: %s", result.run.id, warning)
        if result.input_differs:
            log.warning(
                "start of %s returned the existing run %s, whose input differs",
                name,
                result.run.id,
            )
        return RunHandle(self, result.run.id, name, created=result.created, warning=warning)

    def start(
        self,
        workflow: WorkflowRef,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        deadline: Duration | datetime | None = None,
        version: int | None = None,
        retention_days: int | None = None,
        run_id: str | None = None,
        debounce_key: str | None = None,
        debounce: Duration | None = None,
    ) -> RunHandle:
        """Start a run; see `start_async`."""
        return self._portal.call(
            self.start_async,
            workflow,
            input,
            idempotency_key=idempotency_key,
            priority=priority,
            delay=delay,
            run_at=run_at,
            deadline=deadline,
            version=version,
            retention_days=retention_days,
            run_id=run_id,
            debounce_key=debounce_key,
            debounce=debounce,
        )

    async def run_async(
        self,
        workflow: WorkflowRef,
        input: Any = None,
        *,
        timeout: float | None = None,
        **start_options: Any,
    ) -> Any:
        """Start a run and wait for its output; see `start_async` and `result_async`.

        A bad ``timeout`` is refused before anything is stored."""
        limit = None if timeout is None else to_seconds(timeout, what="timeout")
        run_id = start_options.pop("run_id", None)
        run_id = new_run_id() if run_id is None else check_id(run_id, "run_id")
        # Waiting from before the start: the end cannot slip by, so a new run needs no
        # read before its end notice (or this process's worker) says how it ended.
        async with RunEndWait(await self._backend(), run_id) as waiting:
            handle = await self.start_async(workflow, input, run_id=run_id, **start_options)
            if handle.created:
                return ended_as(run_id, await waiting.outcome(limit, fresh=True))
        return await self.result_async(handle.id, timeout=timeout)  # an existing run

    def run(
        self,
        workflow: WorkflowRef,
        input: Any = None,
        *,
        timeout: float | None = None,
        **start_options: Any,
    ) -> Any:
        """Start a run and wait for its output; see `run_async`."""
        return self._portal.call(self.run_async, workflow, input, timeout=timeout, **start_options)

    # ------------------------------------------------------------------ schema

    async def migrate_async(self) -> int:
        """Apply pending schema migrations; returns the schema version."""
        return await self._connections.migrate()

    def migrate(self) -> int:
        """Apply pending schema migrations; see `migrate_async`."""
        return self._portal.call(self.migrate_async)
