"""The context a workflow body receives, and its step API (`ctx.step`).

Code outside `ctx.step` calls runs again on every replay: keep side effects inside
steps, and keep the body deterministic (branch on step results, not on clocks or
random numbers read outside a step).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .durations import MAX_SECONDS, Duration, to_seconds
from .errors import ValidationError
from .names import step_name_of, validate_event_name, validate_step_name, workflow_name
from .retry import RetryPolicy
from .serialization import encode
from .typed import rebuild, return_type

if TYPE_CHECKING:
    from .records import Received, Run

__all__ = ["Context", "RunLog", "StepApi", "StepRuntime"]

T = TypeVar("T")

#: Journal keys of the values a run sets (``ctx.set``) start with this.
VALUE_PREFIX = "~set:"

#: An argument not given (None is a value some of them take).
_UNSET: Any = object()


class StepRuntime(Protocol):
    """What `Context` needs from the engine executing the pass (the engine implements
    it; this module never imports the engine, so the import graph points one way)."""

    @property
    def run(self) -> Run:
        """The run being executed."""

    @property
    def step_key(self) -> str | None:
        """The key of the step the body reached last."""

    @property
    def replaying(self) -> bool:
        """True while the body re-executes steps already journaled."""

    def now(self) -> datetime:
        """The database clock."""

    async def run_step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        rollback: Callable[[Any], Any] | None = None,
        rollback_retry: RetryPolicy | None = None,
    ) -> Any:
        """Run (or replay) one step."""

    async def transaction(
        self, name: str, fn: Callable[[Any], Any], *, retry: RetryPolicy | None = None
    ) -> Any:
        """Run (or replay) one transactional step."""

    async def sleep_until(self, name: str, when: datetime) -> None:
        """Park durably until ``when``."""

    async def wait_for_event(
        self, name: str, event: str, match_json: str | None, timeout: float | None
    ) -> Any:
        """Park until the event arrives or the timeout passes."""

    async def run_child(
        self, name: str, workflow: str, input_json: str, timeout: float | None
    ) -> Any:
        """Start a child run once and wait for it."""

    async def wait_for_any(
        self, name: str, events: list[str], match_json: str | None, timeout: float | None
    ) -> Received | None:
        """Park until the first of ``events`` arrives or the timeout passes."""

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the patched branch (`Context.patched`)."""

    def deprecate_patch(self, patch_id: str) -> None:
        """Accept the marker of a patch whose old branch is gone."""


class StepApi:
    """Durable operations of a workflow body: ``ctx.step.run(...)`` and friends.

    Every call takes a ``name`` (`run`, `sleep` and `run_workflow` may omit it: the
    function's qualified name, ``sleep``, the child workflow's name); the first use of
    a name in a pass is journaled under ``name``, later uses under ``name:1``,
    ``name:2``... Names are 1-128 characters of letters, digits, ``.``, ``_`` and ``-``.
    """

    __slots__ = ("_runner",)

    def __init__(self, runner: StepRuntime) -> None:
        self._runner = runner

    @overload
    async def run(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        rollback: Callable[[Any], Any] | None = None,
        rollback_retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def run(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        rollback: Callable[[Any], Any] | None = None,
        rollback_retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def run(
        self,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        rollback: Callable[[Any], Any] | None = None,
        rollback_retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def run(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        rollback: Callable[[Any], Any] | None = None,
        rollback_retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> T: ...

    async def run(
        self,
        name: Any,
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        rollback: Callable[[Any], Any] | None = None,
        rollback_retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once and journal its result; on replay return
        the journaled result. Called as ``run(name, fn, *args)`` or, unnamed, as
        ``run(fn, *args)``.

        Args:
            name: the step's name. Optional: ``run(fn, *args)`` names the step after
                ``fn``'s qualified name (``charge``, ``Billing.charge``; a nested
                function's ``outer.<locals>.inner`` becomes ``outer.inner``). A lambda,
                a `functools.partial` or any callable without such a name must be
                given a name (`ValidationError`).
            fn: the function. A plain function runs in the worker's thread pool (never
                on the event loop); an ``async def`` function, or one that returns an
                awaitable, is awaited. Inside it, `perdure.current_step()` gives the
                step's key, attempt and idempotency key.
            *args, **kwargs: passed to ``fn`` (on the first run only: a replay returns
                the journaled value without calling it).
            retry: the step's `RetryPolicy`. Default: the workflow's ``step_retry``,
                else the app's, else 3 attempts, exponential backoff 1s→60s with 20%
                jitter. Between attempts the run parks and frees its worker slot.
            timeout: an attempt that runs longer fails (and may be retried).
            rollback: called with this step's output, newest step first, if the run
                later fails for good (compensation). Each rollback runs durably.
            rollback_retry: the rollback's `RetryPolicy`. Default: the step's policy.

        Returns:
            The JSON-decoded value: the same on the first run and on every replay; when
            ``fn`` is annotated to return a dataclass or pydantic model, that type.

        Raises:
            StepFailed: the step failed for good (also on replay); the body may catch it.
        """
        if isinstance(name, str):
            if not args:
                raise ValidationError(f"step {name!r}: missing the function to run")
            fn, args = args[0], args[1:]
            validate_step_name(name)
        else:
            fn = name
            name = step_name_of(fn)
        if not callable(fn):
            raise ValidationError(f"step {name!r}: fn must be callable, got {type(fn).__name__}")
        if rollback is not None and not callable(rollback):
            raise ValidationError(f"step {name!r}: rollback must be callable")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ValidationError(f"step {name!r}: retry must be a perdure.RetryPolicy")
        if rollback_retry is not None and not isinstance(rollback_retry, RetryPolicy):
            raise ValidationError(f"step {name!r}: rollback_retry must be a perdure.RetryPolicy")
        seconds = None if timeout is None else to_seconds(timeout, what=f"step {name!r} timeout")
        call = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        value = await self._runner.run_step(
            name,
            call,
            retry=retry,
            timeout=seconds,
            rollback=rollback,
            rollback_retry=rollback_retry,
        )
        return rebuild(value, return_type(fn))

    @overload
    async def transaction(
        self,
        name: str,
        fn: Callable[[Any], Awaitable[T]],
        /,
        *,
        retry: RetryPolicy | None = None,
    ) -> T: ...

    @overload
    async def transaction(
        self,
        name: str,
        fn: Callable[[Any], T],
        /,
        *,
        retry: RetryPolicy | None = None,
    ) -> T: ...

    async def transaction(
        self,
        name: str,
        fn: Callable[[Any], Any],
        /,
        *,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Call ``fn(conn)`` with the connection of the transaction that journals this
        step: the writes ``fn`` makes through ``conn`` and the step's result commit
        together or not at all, so the step takes effect exactly once (not at least
        once, as `run` does). On replay the journaled result is returned without
        calling ``fn``.

        Args:
            name: the step's name.
            fn: called with the connection: on PostgreSQL a psycopg ``AsyncConnection``
                on the application's database (its own search path, not perdure's
                schema), so ``fn`` is normally an ``async def``; on SQLite the
                ``sqlite3.Connection`` of the run database, for tables in the same file
                (``fn`` runs on the backend's thread and holds the file's write lock:
                keep it short). A function that returns an awaitable is awaited. ``fn``
                must not commit or roll back; perdure does.
            retry: the step's `RetryPolicy` (default as for `run`). A failed attempt
                rolls back its writes before the next one runs.

        Returns:
            The JSON-decoded value ``fn`` returned, the same on every replay; when ``fn``
            is annotated to return a dataclass or pydantic model, that type.

        Raises:
            StepFailed: the step failed for good (also on replay).

        If the run's lease was lost meanwhile (another worker owns the run), nothing
        commits: neither the row nor the writes. See docs/exactly-once.md.
        """
        validate_step_name(name)
        if not callable(fn):
            raise ValidationError(f"step {name!r}: fn must be callable, got {type(fn).__name__}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ValidationError(f"step {name!r}: retry must be a perdure.RetryPolicy")
        value = await self._runner.transaction(name, fn, retry=retry)
        return rebuild(value, return_type(fn))

    @overload
    async def sleep(self, duration: Duration, /) -> None: ...

    @overload
    async def sleep(self, name: str, duration: Duration) -> None: ...

    async def sleep(self, name: Any, duration: Any = _UNSET) -> None:
        """Sleep durably for ``duration`` ("5m", seconds, timedelta); the run parks and
        frees its worker slot, and wakes once, never early. ``sleep("5m")`` names the
        step ``sleep``; ``sleep(name, "5m")`` names it."""
        if duration is _UNSET:
            name, duration = "sleep", name
        validate_step_name(name)
        seconds = to_seconds(duration, what=f"sleep {name!r} duration")
        await self._runner.sleep_until(name, self._runner.now() + timedelta(seconds=seconds))

    async def sleep_until(self, name: str, when: datetime) -> None:
        """Sleep durably until ``when`` (a timezone-aware datetime; a past time returns at once)."""
        validate_step_name(name)
        if not isinstance(when, datetime):
            raise ValidationError(f"sleep_until {name!r}: when must be a datetime, got {when!r}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValidationError(
                f"sleep_until {name!r}: {when!r} has no timezone; pass an aware datetime "
                "(e.g. datetime.now(timezone.utc) + ...)"
            )
        if (when - self._runner.now()).total_seconds() > MAX_SECONDS:
            raise ValidationError(
                f"sleep_until {name!r}: {when.isoformat()} is over 100 years away"
            )
        await self._runner.sleep_until(name, when)

    async def wait_for_event(
        self,
        name: str,
        *,
        event: str | list[str] | None = None,
        match: Any = None,
        timeout: Duration | None = None,
    ) -> Any:
        """Park until a signal or published event arrives, or the timeout passes.

        Args:
            name: the step's name.
            event: the event to wait for (default: ``name``); a list waits for the
                first of them and returns `Received(event, payload)`. Buffered signals
                count; the ones not taken stay buffered for later waits.
            match: a JSON value the payload must contain (Postgres ``@>`` semantics:
                objects by subset of keys, arrays as subsets); None accepts any payload.
            timeout: give up after this long.

        Returns:
            The payload, or None when the timeout passed first. Journaled: replay returns
            the same.
        """
        validate_step_name(name)
        match_json = None if match is None else encode(match, what=f"wait {name!r} match")
        seconds = None if timeout is None else to_seconds(timeout, what=f"wait {name!r} timeout")
        if isinstance(event, list | tuple):
            names = list(dict.fromkeys(validate_event_name(e) for e in event))
            if not names:
                raise ValidationError(f"wait {name!r}: the list of events is empty")
            return await self._runner.wait_for_any(name, names, match_json, seconds)
        event_name = validate_event_name(event if event is not None else name)
        return await self._runner.wait_for_event(name, event_name, match_json, seconds)

    @overload
    async def run_workflow(
        self, workflow: Any, input: Any = None, /, *, timeout: Duration | None = None
    ) -> Any: ...

    @overload
    async def run_workflow(
        self, name: str, workflow: Any, input: Any = None, *, timeout: Duration | None = None
    ) -> Any: ...

    async def run_workflow(
        self,
        name: Any,
        workflow: Any = _UNSET,
        input: Any = None,
        *,
        timeout: Duration | None = None,
    ) -> Any:
        """Start a child run once (never twice, whatever replays), wait for it to end,
        and return its output. Called as ``run_workflow(name, workflow, input)`` or,
        unnamed, as ``run_workflow(workflow, input)`` with the decorated workflow (or
        ``run_workflow("child-name")`` with no input): the step is then named after the
        child workflow.

        Args:
            name: the step's name (a string: give it whenever ``workflow`` is a name
                and there is an input).
            workflow: the child workflow (decorated function or name).
            input: the child's input (JSON).
            timeout: how long this step waits. Past it the step fails with
                `StepFailed` (error type ``ChildTimeout``) and the child keeps running
                on its own (it is not cancelled and gets no deadline from it).

        Raises:
            StepFailed: the child failed or was cancelled, or the timeout passed.
        """
        if workflow is _UNSET:
            workflow, name = name, None
        elif not isinstance(name, str):
            workflow, input, name = name, workflow, None
        wf_name = workflow_name(workflow)
        if name is None:
            name = wf_name
        validate_step_name(name)
        input_json = encode(input, what=f"the input of child workflow {wf_name!r}")
        seconds = None if timeout is None else to_seconds(timeout, what=f"child {name!r} timeout")
        return await self._runner.run_child(name, wf_name, input_json, seconds)


class RunLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """``ctx.log``: a standard logger adapter (logger ``perdure.workflow``) that is silent
    while the body replays steps already journaled, so a line is written once per real
    execution, and tags each record with ``run_id``, ``workflow`` and ``step``."""

    def __init__(self, runner: StepRuntime) -> None:
        super().__init__(logging.getLogger("perdure.workflow"), {})
        self._runner = runner

    def isEnabledFor(self, level: int) -> bool:
        return not self._runner.replaying and self.logger.isEnabledFor(level)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        runner = self._runner
        tags = {"run_id": runner.run.id, "workflow": runner.run.workflow, "step": runner.step_key}
        kwargs["extra"] = {**tags, **(kwargs.get("extra") or {})}
        where = f"{runner.run.workflow} {runner.run.id}"
        if runner.step_key is not None:
            where += f" after {runner.step_key}"
        return f"[{where}] {msg}", kwargs


class Context:
    """What a workflow body receives as ``ctx``.

    Attributes:
        run_id: the run's id.
        workflow: the workflow's name.
        version: the version this run executes.
        attempt: the workflow-level attempt (1 unless a workflow retry policy reran it).
        input: the run's input.
        cancelled: an `asyncio.Event` set when the run is cancelled (or this worker lost it).
        step: the durable step API (`StepApi`).
        log: a logger (`RunLog`) silent while the body replays journaled steps, its
            records tagged with run id, workflow and step.
    """

    __slots__ = ("_runner", "cancelled", "log", "step")

    def __init__(self, runner: StepRuntime) -> None:
        self._runner = runner
        self.step = StepApi(runner)
        self.cancelled = asyncio.Event()
        self.log = RunLog(runner)

    @property
    def run_id(self) -> str:
        return self._runner.run.id

    @property
    def workflow(self) -> str:
        return self._runner.run.workflow

    @property
    def version(self) -> int:
        version = self._runner.run.version
        assert version is not None  # a claim fixes the version of every run it returns
        return version

    @property
    def attempt(self) -> int:
        return self._runner.run.attempt

    @property
    def input(self) -> Any:
        return self._runner.run.input

    async def set(self, key: str, value: Any) -> None:
        """Record ``value`` (JSON) under ``key`` for the run's watchers:
        `App.get_values` reads the latest value of each key, and `App.watch` sees a
        ``value`` event ``{key, value}`` for every call.

        Durable and replay-stable: the call is journaled like a step (under
        ``~set:<key>``), so a replay does not write again and the first pass's value
        stands; a later call with the same key replaces it. Keys follow the rules of
        step names."""
        validate_step_name(key, what="value key")
        encode(value, what=f"value {key!r}")
        record = {"key": key, "value": value}

        async def recorded() -> dict[str, Any]:
            return record

        await self._runner.run_step(VALUE_PREFIX + key, recorded)

    def patched(self, patch_id: str) -> bool:
        """Change a workflow's code in place, without a new version: ``if
        ctx.patched("fix-total"): new code, else: old code``.

        True for a run that reaches this point on code that has the patch (the
        journal records a marker there, so its replays take the same branch) and for
        new runs; False for a run whose journal shows it passed this point without
        the patch (it keeps replaying the old branch). Call it in the body's main
        line, not inside parallel branches. Once no live run predates the patch,
        replace the call with `deprecate_patch` and keep only the new branch; once
        no live run holds the marker, remove that too (docs/versioning.md).

        Raises:
            ValidationError: ``patch_id`` does not follow the rules of step names.
        """
        validate_step_name(patch_id, what="patch id")
        return self._runner.patched(patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """Mark a patch whose old branch was removed: runs whose journal holds its
        marker replay on, and new runs record nothing (see `patched`).

        Raises:
            ValidationError: ``patch_id`` does not follow the rules of step names.
        """
        validate_step_name(patch_id, what="patch id")
        self._runner.deprecate_patch(patch_id)

    def __repr__(self) -> str:
        return f"<Context run={self.run_id} workflow={self.workflow} v{self.version}>"
