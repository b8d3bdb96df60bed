"""Contract: worker registry (register/list/deregister) and retention (sweep)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from perdure.backends.base import Backend
from perdure.records import Complete, Fail, Park, Run, WaitWrite, WorkerInfo

from .helpers import (
    claim_one,
    clock_passes,
    close_to,
    completed,
    create,
    event_types,
    js,
    new_run,
    skip_clock,
    transition,
)

pytestmark = pytest.mark.timeout(60)


def _worker(worker_id: str, at: datetime, concurrency: int = 4) -> WorkerInfo:
    return WorkerInfo(worker_id, "host-1", 4242, ("wf", "other*"), concurrency, at, at)


# --------------------------------------------------------------------------- workers


async def test_register_worker_stores_it_with_the_database_now(backend: Backend) -> None:
    long_ago = (await backend.now()) - timedelta(days=3)
    before = await backend.now()
    await backend.register_worker(_worker("w1", long_ago))
    after = await backend.now()

    workers = await backend.list_workers(60)
    assert len(workers) == 1
    info = workers[0]
    assert (info.id, info.host, info.pid, info.workflows, info.concurrency) == (
        "w1",
        "host-1",
        4242,
        ("wf", "other*"),
        4,
    )
    assert close_to(info.started_at, long_ago)
    # last_seen_at is the database's now, not what the caller sent.
    slack = timedelta(milliseconds=5)
    assert before - slack <= info.last_seen_at <= after + slack
    assert info.stopped_at is None


async def test_register_worker_upserts(backend: Backend) -> None:
    now = await backend.now()
    await backend.register_worker(_worker("w1", now, concurrency=2))
    [first] = await backend.list_workers(60)
    await clock_passes(backend, first.last_seen_at)
    await backend.register_worker(_worker("w1", now, concurrency=8))
    workers = await backend.list_workers(60)
    assert len(workers) == 1
    assert workers[0].concurrency == 8
    assert workers[0].last_seen_at > first.last_seen_at


async def test_list_workers_newest_first_and_within_the_window(backend: Backend) -> None:
    now = await backend.now()
    await backend.register_worker(_worker("old", now))
    await backend.list_workers(60)
    await skip_clock(backend, 120)  # the old worker was last seen two minutes ago
    await backend.register_worker(_worker("new", now))
    assert [w.id for w in await backend.list_workers(3600)] == ["new", "old"]
    assert [w.id for w in await backend.list_workers(60)] == ["new"]


async def test_deregister_worker_sets_stopped_at(backend: Backend) -> None:
    now = await backend.now()
    await backend.register_worker(_worker("w1", now))
    await backend.register_worker(_worker("w2", now))
    before = await backend.now()
    await backend.deregister_worker("w1")
    after = await backend.now()
    workers = {w.id: w for w in await backend.list_workers(60)}
    assert workers["w2"].stopped_at is None
    stopped = workers["w1"].stopped_at
    assert stopped is not None
    slack = timedelta(milliseconds=5)
    assert before - slack <= stopped <= after + slack
    # Unknown ids are not an error.
    await backend.deregister_worker("nobody")


# --------------------------------------------------------------------------- sweep


async def _finish(backend: Backend, workflow: str, how: str, retention: int) -> Run:
    """A run of ``workflow`` ended ``how`` (completed/failed/cancelled), with a journal."""
    run = await create(backend, workflow, retention_days=retention)
    if how == "cancelled":
        assert await backend.cancel_run(run.id)
    else:
        held = await claim_one(backend, workflows=((workflow, 1),))
        outcome = Complete(js("ok")) if how == "completed" else Fail({"type": "E", "message": ""})
        assert (await transition(backend, held, outcome, steps=(completed("s", 1),))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == how
    assert stored.completed_at is not None
    return stored


async def _gone(backend: Backend, run_id: str) -> bool:
    return (
        await backend.get_run(run_id) is None
        and await backend.get_steps(run_id) == []
        and await backend.get_events(run_id) == []
    )


async def test_sweep_deletes_only_terminal_runs_past_retention(backend: Backend) -> None:
    # Live runs with retention 0, in every live status.
    pending = await create(backend, "live", retention_days=0)
    waiting = await create(backend, "wait", retention_days=0)
    held = await claim_one(backend, workflows=(("wait", 1),))
    assert (
        await transition(
            backend,
            held,
            Park("event"),
            steps=(completed("s", 1),),
            waits=(WaitWrite("w", "e"),),
        )
    ).ok
    running = await create(backend, "run", retention_days=0)
    assert (await claim_one(backend, workflows=(("run", 1),))).run.id == running.id
    assert await backend.deliver_signal(pending.id, "e", js(1)) == "buffered"

    expired = [
        await _finish(backend, "a", "completed", 0),
        await _finish(backend, "b", "failed", 0),
        await _finish(backend, "c", "cancelled", 0),
    ]
    kept = await _finish(backend, "d", "completed", 30)
    recent = await _finish(backend, "e", "completed", 1)
    assert await backend.get_steps(expired[0].id) != []
    assert await backend.get_events(expired[0].id) != []

    last = max(r.completed_at for r in [*expired, kept, recent] if r.completed_at is not None)
    await clock_passes(backend, last)
    assert await backend.sweep(max_retention_days=30) == 3
    for run in expired:
        assert await _gone(backend, run.id), run.status
    for run in (kept, recent):
        assert await backend.get_run(run.id) is not None
        assert await backend.get_steps(run.id) != []
    for run_id, status in (
        (pending.id, "pending"),
        (waiting.id, "waiting"),
        (running.id, "running"),
    ):
        stored = await backend.get_run(run_id)
        assert stored is not None
        assert stored.status == status
        assert "created" in await event_types(backend, run_id)
    assert [s.name for s in await backend.get_steps(waiting.id)] == ["s"]
    assert await backend.sweep(max_retention_days=30) == 0

    # max_retention_days caps every run's own retention.
    assert await backend.sweep(max_retention_days=0) == 2
    assert await _gone(backend, kept.id)
    assert await _gone(backend, recent.id)
    for run_id in (pending.id, waiting.id, running.id):
        assert await backend.get_run(run_id) is not None
    # The live run's buffered signal survived too.
    held = await claim_one(backend, workflows=(("live", 1),))
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("w", "e"),))).ok
    assert [s.output for s in await backend.get_steps(pending.id)] == [1]


async def test_sweep_respects_limit(backend: Backend) -> None:
    finished = [await _finish(backend, f"wf{i}", "completed", 0) for i in range(5)]
    last = max(r.completed_at for r in finished if r.completed_at is not None)
    await clock_passes(backend, last)
    assert [await backend.sweep(30, limit=2) for _ in range(4)] == [2, 2, 1, 0]
    for run in finished:
        assert await _gone(backend, run.id)


async def test_sweep_on_an_empty_database(backend: Backend) -> None:
    assert await backend.sweep(0) == 0


async def test_sweeping_a_parent_never_touches_its_live_children(backend: Backend) -> None:
    parent = await create(backend, retention_days=0)
    held = await claim_one(backend)
    child = new_run("child", input=1, parent_id=parent.id, parent_step="c")
    assert (await transition(backend, held, Complete(js("p")), children=(child,))).ok
    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert stored.completed_at is not None
    await clock_passes(backend, stored.completed_at)
    assert await backend.sweep(30) == 1
    assert await _gone(backend, parent.id)
    kid = await backend.get_run(child.id)
    assert kid is not None
    assert kid.status == "pending"
    assert kid.parent_id == parent.id
    # The orphan still runs to its end.
    got = await claim_one(backend, workflows=(("child", 1),))
    assert got.run.id == child.id
    assert (await transition(backend, got, Complete(js("c")))).ok
