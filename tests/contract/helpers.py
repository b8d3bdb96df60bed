"""Small builders for the contract suite: runs, claims, transitions, deadline polling.

Everything here speaks the `Backend` API only. Time-dependent checks poll with
`wait_until` under a deadline; a bare sleep never stands in for an assertion.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, overload

from perdure.backends.base import Backend, Unsubscribe
from perdure.ids import new_run_id
from perdure.records import (
    Claim,
    ClaimParams,
    NewRun,
    Outcome,
    Park,
    Run,
    StepWrite,
    Transition,
    TransitionResult,
    WaitWrite,
)
from perdure.serialization import encode

T = TypeVar("T")


class DatabaseLike(Protocol):
    """What the ``database`` fixture yields (`tests/conftest.py`'s ``Database``)."""

    kind: str
    url: str
    schema: str

    def make_backend(self) -> Backend: ...


#: ``await backend_factory()``: another opened instance on the test's database.
BackendFactory = Callable[[], Awaitable[Backend]]

WF: tuple[tuple[str, int], ...] = (("wf", 1),)
#: Tolerance for comparing stored timestamps (SQLite keeps REAL seconds).
TIME_TOLERANCE = timedelta(milliseconds=5)


def js(value: Any) -> str:
    """Encode ``value`` as the ``*_json`` text the contract takes."""
    return encode(value, what="test value")


_last_ms = 0


def ordered_run_id() -> str:
    """A run id strictly greater than every id this helper returned before.

    `new_run_id` orders only to the millisecond; tests that check newest-first
    listings need ids whose order is the creation order.
    """
    global _last_ms
    ms = max(int(time.time() * 1000), _last_ms + 1)
    _last_ms = ms
    return new_run_id(now_ms=ms)


def new_run(workflow: str = "wf", version: int | None = 1, input: Any = None, **kw: Any) -> NewRun:
    """A `NewRun` with a fresh (creation-ordered) id and ``input`` encoded."""
    kw.setdefault("id", ordered_run_id())
    return NewRun(workflow=workflow, version=version, input_json=js(input), **kw)


async def create(backend: Backend, workflow: str = "wf", input: Any = None, **kw: Any) -> Run:
    """Create a run and return it (asserting it was created by this call)."""
    result = await backend.create_run(new_run(workflow, input=input, **kw))
    assert result.created
    return result.run


async def claim(
    backend: Backend,
    worker: str = "w1",
    lease: float = 30,
    workflows: Sequence[tuple[str, int]] = WF,
    limit: int = 10,
) -> list[Claim]:
    """`claim_runs` with short arguments."""
    return await backend.claim_runs(ClaimParams(worker, tuple(workflows), limit, lease))


async def claim_one(
    backend: Backend,
    worker: str = "w1",
    lease: float = 30,
    workflows: Sequence[tuple[str, int]] = WF,
) -> Claim:
    """Claim exactly one run (fails the test if nothing is due)."""
    claims = await claim(backend, worker, lease, workflows, limit=1)
    assert len(claims) == 1, f"expected one claim, got {claims!r}"
    return claims[0]


async def claim_eventually(
    backend: Backend,
    worker: str = "w1",
    lease: float = 30,
    workflows: Sequence[tuple[str, int]] = WF,
    timeout: float = 5.0,
) -> Claim:
    """Poll `claim_runs` (limit 1) until a run is claimed."""

    async def attempt() -> Claim | None:
        claims = await claim(backend, worker, lease, workflows, limit=1)
        return claims[0] if claims else None

    return await wait_until(attempt, timeout=timeout)


@overload
async def wait_until(
    predicate: Callable[[], Awaitable[T | None]], timeout: float = ..., interval: float = ...
) -> T: ...
@overload
async def wait_until(
    predicate: Callable[[], T | None], timeout: float = ..., interval: float = ...
) -> T: ...
async def wait_until(
    predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02
) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy.

    Returns that value; raises AssertionError when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate!r}")
        await asyncio.sleep(interval)


async def clock_passes(backend: Backend, moment: datetime, timeout: float = 5.0) -> datetime:
    """Wait until the database clock is strictly past ``moment``; return its now."""

    async def later() -> datetime | None:
        now = await backend.now()
        return now if now > moment else None

    return await wait_until(later, timeout=timeout, interval=0.01)


async def skip_clock(backend: Backend, seconds: float) -> None:
    """Move the database clock ``seconds`` forward (`Backend.set_clock_offset`): leases
    expire and due times pass without waiting for them."""
    await backend.set_clock_offset(await backend.clock_offset() + seconds)


async def apply_one(backend: Backend, transition: Transition) -> TransitionResult:
    results = await backend.apply([transition])
    assert len(results) == 1
    return results[0]


async def transition(
    backend: Backend, held: Claim, outcome: Outcome | None = None, **kw: Any
) -> TransitionResult:
    """Apply one transition for ``held`` (its run id and lease token)."""
    return await apply_one(
        backend, Transition(held.run.id, held.lease_token, outcome=outcome, **kw)
    )


async def park_waiting(
    backend: Backend,
    held: Claim,
    key: str = "w",
    event: str = "e",
    match: Any = None,
    *,
    timeout_at: datetime | None = None,
    wake_at: datetime | None = None,
) -> TransitionResult:
    """Park ``held`` on one wait (``match`` None: any payload)."""
    wait = WaitWrite(key, event, None if match is None else js(match), timeout_at)
    result = await transition(backend, held, Park("event", wake_at), waits=(wait,))
    assert result.ok
    return result


def completed(key: str, output: Any = None, kind: str = "run", **kw: Any) -> StepWrite:
    """A completed `StepWrite` with ``output`` encoded."""
    return StepWrite(key, kind, "completed", js(output), **kw)


def close_to(a: datetime | None, b: datetime | None, tol: timedelta = TIME_TOLERANCE) -> bool:
    """True if both are set and within ``tol`` of each other."""
    return a is not None and b is not None and abs(a - b) <= tol


async def event_types(backend: Backend, run_id: str) -> list[str]:
    return [event.type for event in await backend.get_events(run_id)]


class Notices:
    """Collects notices from `Backend.subscribe`, remembering where each was delivered."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str | None]] = []
        self.off_loop: list[str] = []
        self.loop = asyncio.get_running_loop()

    def __call__(self, notice: Any) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self.loop:
            self.off_loop.append(f"{notice!r} delivered outside the subscriber's loop")
        self.items.append((notice.kind, notice.run_id))

    def has(self, kind: str, run_id: str | None) -> bool:
        return (kind, run_id) in self.items

    def kinds_for(self, run_id: str) -> list[str]:
        return [kind for kind, rid in self.items if rid == run_id]


_warmups = itertools.count()


async def listen_live(source: Backend, subscriber: Backend) -> tuple[Notices, Unsubscribe]:
    """Subscribe on ``subscriber`` and wait until notices from ``source`` reach it (a
    listener that connects in the background is not mistaken for a lost notice)."""
    notices = Notices()
    unsubscribe = await subscriber.listen(notices)
    warm_ids: list[str] = []

    async def live() -> bool:
        run = await create(source, f"warmup{next(_warmups)}")
        warm_ids.append(run.id)
        return any(notices.has("wake", run_id) for run_id in warm_ids)

    await wait_until(live, timeout=10, interval=0.1)
    return notices, unsubscribe
