"""result()'s waiters share one notice subscription per event loop, and a run's end
wakes the waiters of that run only (with a listener per waiter, every notice woke
every waiter)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest

from perdure import App, Context, RetryPolicy, WorkflowFailed
from perdure._end_waiters import RunEndWait, waiting_for_end
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


def test_run_and_result_return_on_the_end_itself_not_on_the_poll(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the safety-net read pushed out of reach, `run()` and `result()` still
    return: the end reaches them by this process's worker or by the end notice. `run()`
    waits from before its start, so a run that ends at once cannot slip by, and an
    existing run (same idempotency key) is waited for like any other."""
    monkeypatch.setattr(RunEndWait, "polls", {"postgres": (600, 600), "sqlite": (600, 600)})

    @app.workflow
    async def echo(ctx: Context, n: int) -> int:
        return await ctx.step.run("a", lambda: n)

    @app.workflow
    async def boom(ctx: Context, _: None) -> None:
        await ctx.step.run("explode", lambda: 1 / 0, retry=RetryPolicy(max_attempts=1))

    with app.worker():
        assert [app.run(echo, i, timeout=120) for i in range(20)] == list(range(20))
        assert app.run(echo, 7, idempotency_key="k", timeout=120) == 7
        assert app.run(echo, 8, idempotency_key="k", timeout=120) == 7  # the existing run
        assert app.run(echo, 9, run_id="mine:9", timeout=120) == 9
        with pytest.raises(WorkflowFailed) as info:
            app.run(boom, timeout=120)
        assert info.value.error is not None and info.value.error["type"] == "StepFailed"
        handle = app.start(echo, 5)
        assert handle.result(timeout=120) == 5
