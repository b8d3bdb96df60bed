"""result()'s waiters share one notice subscription per event loop, and a run's end
wakes the waiters of that run only (with a listener per waiter, every notice woke
every waiter)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from pathlib import Path

from perdure._end_waiters import waiting_for_end
from perdure.backends.base import Backend
from perdure.backends.sqlite import SQLiteBackend
from perdure.records import Complete, Notice

from ..contract.helpers import claim_one, create, js, transition, wait_until


async def test_a_run_end_wakes_its_own_waiters_only(backend: Backend) -> None:
    first = await create(backend)
    second = await create(backend)
    seen: list[Notice] = []
    unsubscribe = await backend.listen(seen.append)  # what the backend delivered
    woken: list[str] = []
    stops = [
        await waiting_for_end(backend, first.id, lambda _: woken.append("first")),
        await waiting_for_end(backend, first.id, lambda _: woken.append("first again")),
        await waiting_for_end(backend, second.id, lambda _: woken.append("second")),
    ]
    held = await claim_one(backend)  # the oldest: the first run
    assert held.run.id == first.id
    assert (await transition(backend, held, Complete(js("done")))).ok
    await wait_until(lambda: len(woken) >= 2, timeout=10)
    # One notice wakes all the waiters it reaches at once: a notice naming the first
    # run wakes its two waiters only.
    assert sorted(w for w in woken if w != "second") == ["first", "first again"]
    if "second" in woken:  # only a notice without a run id (SQLite: another process
        # changed the file, look again) may wake everyone; this listener sees it too
        await wait_until(lambda: any(n.run_id is None for n in seen), timeout=10)
    for stop in stops:
        await stop()
    await unsubscribe()


def _setter(event: asyncio.Event) -> Callable[[Notice], None]:
    return lambda _: event.set()


async def test_the_last_waiter_leaving_unsubscribes_and_the_next_subscribes_again(
    backend: Backend,
) -> None:
    for _ in range(2):  # a second round after everyone left
        run = await create(backend)
        woken = asyncio.Event()
        stop = await waiting_for_end(backend, run.id, _setter(woken))
        held = await claim_one(backend)
        assert (await transition(backend, held, Complete(js(1)))).ok
        await asyncio.wait_for(woken.wait(), 10)
        await stop()


async def test_the_registry_keeps_no_backend_alive(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "runs.db")
    await backend.open()
    stop = await waiting_for_end(backend, "01ARZ3NDEKTSV4RRFFQ69G5FAV", lambda _: None)
    await stop()
    await backend.close()
    gone = weakref.ref(backend)
    del backend
    gc.collect()
    assert gone() is None, "the result waiters' registry kept a closed backend alive"
