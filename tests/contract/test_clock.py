"""Contract: the database clock can be moved (`clock_offset`, `set_clock_offset`), and
moving it moves every due time, lease, deadline and retry backoff, for every backend
instance and process on the database, without any real waiting."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta

import pytest

from perdure.backends.base import Backend
from perdure.errors import ValidationError
from perdure.records import Park, Retry

from .helpers import (
    BackendFactory,
    DatabaseLike,
    Notices,
    claim,
    claim_one,
    create,
    transition,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

DAY = 86400.0


async def test_the_clock_starts_at_real_time_and_moves_by_the_offset(backend: Backend) -> None:
    assert await backend.clock_offset() == 0.0
    before = await backend.now()
    await backend.set_clock_offset(7 * DAY + 0.123456)
    assert await backend.clock_offset() == 7 * DAY + 0.123456
    moved = await backend.now()
    assert timedelta(days=7) < moved - before < timedelta(days=7, minutes=1)


async def test_moving_the_clock_makes_a_delayed_run_due(backend: Backend) -> None:
    later = await create(backend, delay=3 * DAY)
    assert await claim(backend) == []
    await backend.set_clock_offset(3 * DAY)
    held = await claim_one(backend)
    assert held.run.id == later.id
    assert held.now >= later.created_at + timedelta(days=3)


async def test_moving_the_clock_fires_a_timer_and_a_retry_backoff(backend: Backend) -> None:
    sleeper = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("sleep", held.now + timedelta(days=7)))).ok
    failing = await create(backend)
    second = await claim_one(backend)
    backoff = Retry(second.now + timedelta(hours=1), {"type": "Boom", "message": "x"})
    assert (await transition(backend, second, backoff)).ok
    assert await claim(backend) == []

    await backend.set_clock_offset(2 * 3600)
    assert [c.run.id for c in await claim(backend)] == [failing.id]  # the backoff passed
    await backend.set_clock_offset(7 * DAY)
    # the 7-day timer, and the retried run again: its 30 s lease is long past
    assert {c.run.id for c in await claim(backend)} == {sleeper.id, failing.id}


async def test_moving_the_clock_expires_leases_and_reaches_deadlines(backend: Backend) -> None:
    leased = await create(backend)
    await claim_one(backend, worker="w-gone", lease=30)
    bounded = await create(backend, deadline_in=3600.0)
    held = await claim_one(backend, worker="w-a", lease=30)
    assert held.run.id == bounded.id
    far = Park("sleep", held.now + timedelta(days=30))
    assert (await transition(backend, held, far)).ok
    stored = await backend.get_run(bounded.id)
    assert stored is not None and stored.wake_at == stored.deadline_at  # parked until it

    await backend.set_clock_offset(2 * 3600)
    again = {c.run.id: c for c in await claim(backend, worker="w-b")}
    assert set(again) == {leased.id, bounded.id}
    assert again[leased.id].recovered  # the first worker's 30 s lease expired
    deadline = again[bounded.id].run.deadline_at
    assert deadline is not None and again[bounded.id].now > deadline


async def test_another_instance_sees_the_moved_clock(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    later = await create(backend, delay=DAY)
    await backend.set_clock_offset(DAY)
    assert await other.clock_offset() == DAY
    assert (await claim_one(other)).run.id == later.id
    await other.set_clock_offset(2 * DAY)
    assert await backend.clock_offset() == 2 * DAY


_READ_CLOCK = """
import asyncio, json, sys
from pathlib import Path

async def main(kind, url, schema):
    if kind == "sqlite":
        from perdure.backends.sqlite import SQLiteBackend
        backend = SQLiteBackend(Path(url.removeprefix("sqlite:///")))
    else:
        from perdure.backends.postgres import PostgresBackend
        backend = PostgresBackend(url, schema=schema)
    await backend.open()
    try:
        print(json.dumps([await backend.clock_offset(), (await backend.now()).timestamp()]))
    finally:
        await backend.close()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_another_process_sees_the_moved_clock(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    db: DatabaseLike = request.getfixturevalue(f"{backend.dialect}_database")
    await backend.set_clock_offset(5 * DAY)
    before = await backend.now()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _READ_CLOCK,
        db.kind,
        db.url,
        db.schema,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(child.communicate(), timeout=60)
    assert child.returncode == 0
    offset, now = json.loads(out)
    assert offset == 5 * DAY
    assert now >= before.timestamp()  # the other process's clock is the moved one
    assert now - before.timestamp() < 60


async def test_a_move_wakes_listeners(backend: Backend) -> None:
    notices = Notices()
    unsubscribe = await backend.listen(notices)
    try:

        async def woken() -> bool:
            # The listener may connect in the background: move again until heard.
            await backend.set_clock_offset(await backend.clock_offset() + 60)
            return notices.has("wake", None)

        await wait_until(woken, timeout=10, interval=0.2)
    finally:
        await unsubscribe()


@pytest.mark.parametrize(
    "bad", [-1.0, float("nan"), float("inf"), True, "1d", None, 101 * 365.25 * DAY]
)
async def test_a_bad_offset_is_refused_and_changes_nothing(backend: Backend, bad: object) -> None:
    with pytest.raises(ValidationError):
        await backend.set_clock_offset(bad)  # type: ignore[arg-type]
    assert await backend.clock_offset() == 0.0


async def test_the_clock_never_runs_backwards(backend: Backend) -> None:
    await backend.set_clock_offset(DAY)
    await backend.set_clock_offset(DAY)  # the same offset again is fine
    with pytest.raises(ValidationError, match="never runs backwards"):
        await backend.set_clock_offset(DAY - 1)
    assert await backend.clock_offset() == DAY


async def test_migrate_keeps_the_moved_clock(backend: Backend) -> None:
    await backend.set_clock_offset(3 * DAY)
    await backend.migrate()
    assert await backend.clock_offset() == 3 * DAY
