"""Contract: claim_runs (due times, order, filters, exclusivity, lease expiry), next_wake_at."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from perdure.backends.base import Backend
from perdure.records import Claim, Complete, DeferParams, Park, Release, StepWrite, WaitWrite

from .helpers import (
    BackendFactory,
    claim,
    claim_one,
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

#: Tolerance for lease expiries computed from `Claim.now` (claim happens in one transaction).
_TOL = timedelta(milliseconds=50)


async def test_claim_takes_a_due_run_and_leases_it(backend: Backend) -> None:
    run = await create(backend, input={"x": 1})
    before = await backend.now()
    held = await claim_one(backend, worker="w-a", lease=30)
    after = await backend.now()

    assert held.run.id == run.id
    assert held.run.status == "running"
    assert held.run.input == {"x": 1}
    assert held.lease_token != 0  # 64 random bits; 0 is a run never claimed
    assert held.journal == ()
    assert held.waits == ()
    assert held.claims_since_progress == 1
    assert held.step_attempts == 0
    assert held.recovered is False
    assert before <= held.now <= after
    assert held.run.started_at is not None
    assert before - timedelta(milliseconds=1) <= held.run.started_at
    assert held.run.started_at <= after + timedelta(milliseconds=1)

    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "running"
    assert stored.wake_at is None  # None while running
    assert close_to(stored.started_at, held.run.started_at)
    assert await event_types(backend, run.id) == ["created", "claimed"]

    # A live lease is exclusive: nobody else gets the run.
    assert await claim(backend, worker="w-b") == []


async def test_claim_respects_delay(backend: Backend) -> None:
    run = await create(backend, delay=3600)
    assert run.wake_at is not None
    assert await claim(backend) == []
    await skip_clock(backend, 3599)
    assert await claim(backend) == []
    await skip_clock(backend, 1)
    held = await claim_one(backend)
    assert held.run.id == run.id
    # Never early: judged by the database clock.
    assert held.now >= run.wake_at


async def test_claim_respects_run_at(backend: Backend) -> None:
    now = await backend.now()
    future = await create(backend, run_at=now + timedelta(seconds=20))
    past = await create(backend, run_at=now - timedelta(minutes=5))
    far = await create(backend, run_at=now + timedelta(hours=1))

    first = await claim_one(backend)
    assert first.run.id == past.id
    assert await claim(backend) == []
    await skip_clock(backend, 20)  # less than the first claim's 30 s lease
    second = await claim_one(backend)
    assert second.run.id == future.id
    assert second.now >= now + timedelta(seconds=20)
    assert await claim(backend) == []
    stored = await backend.get_run(far.id)
    assert stored is not None
    assert stored.status == "pending"


async def test_claim_order_is_priority_then_available_at(backend: Backend) -> None:
    now = await backend.now()
    low = await create(backend, priority=100)
    urgent = await create(backend, priority=10)
    mid_late = await create(backend, priority=50, run_at=now - timedelta(seconds=1))
    mid_early = await create(backend, priority=50, run_at=now - timedelta(seconds=2))
    not_due = await create(backend, priority=1, delay=3600)

    order = [(await claim_one(backend)).run.id for _ in range(4)]
    assert order == [urgent.id, mid_early.id, mid_late.id, low.id]
    assert await claim(backend) == []
    stored = await backend.get_run(not_due.id)
    assert stored is not None
    assert stored.status == "pending"


async def test_claim_batch_respects_limit_and_order(backend: Backend) -> None:
    ids = [(await create(backend, priority=100 - i)).id for i in range(5)]
    first = await claim(backend, limit=3)
    assert [c.run.id for c in first] == [ids[4], ids[3], ids[2]]
    assert all(c.lease_token != 0 for c in first)
    rest = await claim(backend, limit=3)
    assert [c.run.id for c in rest] == [ids[1], ids[0]]
    assert await claim(backend, limit=3) == []


async def test_claim_filters_by_workflow_and_version(backend: Backend) -> None:
    v1 = await create(backend, "wf")
    v2 = (await backend.create_run(new_run("wf", 2))).run
    other = await create(backend, "other")

    assert await claim(backend, workflows=(("nope", 1),)) == []
    assert await claim(backend, workflows=(("wf", 3),)) == []
    got = await claim(backend, workflows=(("wf", 2), ("other", 1)))
    assert {c.run.id for c in got} == {v2.id, other.id}
    got = await claim(backend, workflows=(("wf", 1),))
    assert [c.run.id for c in got] == [v1.id]
    assert await claim(backend, workflows=(("wf", 1), ("wf", 2), ("other", 1))) == []


async def test_two_instances_racing_claim_each_run_exactly_once(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    created = {(await create(backend, input=i)).id for i in range(200)}

    async def claimer(instance: Backend, worker: str) -> list[str]:
        mine: list[str] = []
        while True:
            got = await claim(instance, worker=worker, lease=60, limit=7)
            if not got:
                return mine
            mine.extend(c.run.id for c in got)

    results = await asyncio.gather(
        *(claimer(backend if i % 2 else other, f"w{i}") for i in range(8))
    )
    claimed = [run_id for batch in results for run_id in batch]
    assert len(claimed) == len(set(claimed)), "a run was claimed twice"
    assert set(claimed) == created
    for run_id in list(created)[:10]:
        stored = await backend.get_run(run_id)
        assert stored is not None
        assert stored.status == "running"


async def test_expired_lease_is_reclaimed_with_the_next_token(backend: Backend) -> None:
    run = await create(backend)
    first = await claim_one(backend, worker="w-dead", lease=30)
    assert await claim(backend, worker="w-new") == []
    await skip_clock(backend, 30)

    second = await claim_one(backend, worker="w-new", lease=30)
    assert second.run.id == run.id
    assert second.lease_token != first.lease_token
    assert second.recovered is True
    assert second.claims_since_progress == 2
    assert second.run.status == "running"
    # Not before the lease expired (database clock).
    assert second.now >= first.now + timedelta(seconds=30)
    # started_at is set once, on the first claim.
    assert close_to(second.run.started_at, first.run.started_at)
    assert await event_types(backend, run.id) == [
        "created",
        "claimed",
        "lease_expired",
        "claimed",
    ]
    # The zombie is fenced out.
    stale = await transition(backend, first, Complete(js("zombie")))
    assert stale.ok is False
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "running"
    assert stored.output is None


async def test_claim_returns_journal_and_open_waits(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    now = await backend.now()
    timeout_at = now + timedelta(hours=1)
    result = await transition(
        backend,
        held,
        Park("event", now - timedelta(seconds=1)),
        steps=(completed("b", {"v": 2}), completed("a", [1])),
        waits=(WaitWrite("sig", "approved", js({"ok": True}), timeout_at),),
    )
    assert result.ok
    again = await claim_one(backend)
    assert again.run.id == run.id
    assert again.recovered is False
    assert [(s.name, s.kind, s.status, s.output) for s in again.journal] == [
        ("b", "run", "completed", {"v": 2}),
        ("a", "run", "completed", [1]),
    ]
    assert len(again.waits) == 1
    wait = again.waits[0]
    assert (wait.key, wait.event, wait.match) == ("sig", "approved", {"ok": True})
    assert close_to(wait.timeout_at, timeout_at)
    assert again.run.wake_reason is None  # cleared by the claim
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.wake_reason is None


async def test_claims_since_progress_counts_claims_until_a_commit(backend: Backend) -> None:
    await create(backend)
    c1 = await claim_one(backend, lease=30)
    assert c1.claims_since_progress == 1
    await skip_clock(backend, 30)
    c2 = await claim_one(backend, lease=30)
    assert c2.claims_since_progress == 2
    await skip_clock(backend, 30)
    c3 = await claim_one(backend, lease=30)
    assert c3.claims_since_progress == 3
    assert len({c1.lease_token, c2.lease_token, c3.lease_token}) == 3
    # Any committed transition resets the counter to 0; the next claim makes it 1.
    assert (await transition(backend, c3, steps=(completed("s", 1),))).ok
    assert (await transition(backend, c3, Release())).ok
    c4 = await claim_one(backend)
    assert c4.claims_since_progress == 1
    assert c4.recovered is False


async def test_retrying_step_rows_come_back_in_the_claim(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    retry_row = StepWrite("s", "run", "retrying", None, {"type": "E", "message": "m"}, 2)
    assert (await transition(backend, held, Release(), steps=(retry_row,))).ok
    again = await claim_one(backend)
    assert [(s.name, s.status, s.attempts, s.error) for s in again.journal] == [
        ("s", "retrying", 2, {"type": "E", "message": "m"})
    ]


# --------------------------------------------------------------------------- next_wake_at


async def test_next_wake_at(backend: Backend) -> None:
    assert await backend.next_wake_at([("wf", 1)]) is None
    now = await backend.now()
    later = await create(backend, run_at=now + timedelta(minutes=30))
    await create(backend, "other", run_at=now + timedelta(minutes=1))
    assert close_to(await backend.next_wake_at([("wf", 1)]), later.wake_at)
    assert close_to(
        await backend.next_wake_at([("wf", 1), ("other", 1)]), now + timedelta(minutes=1)
    )
    assert await backend.next_wake_at([("wf", 2)]) is None
    assert await backend.next_wake_at([]) is None

    sooner = await create(backend, run_at=now + timedelta(minutes=5))
    assert close_to(await backend.next_wake_at([("wf", 1)]), sooner.wake_at)

    # A running run's available_at is its lease expiry.
    due = await create(backend, run_at=now - timedelta(minutes=1))
    held = await claim_one(backend, lease=120)
    assert held.run.id == due.id
    assert close_to(
        await backend.next_wake_at([("wf", 1)]), held.now + timedelta(seconds=120), tol=_TOL
    )
    # Ended runs are not scheduled.
    assert (await transition(backend, held, Complete(js(None)))).ok
    assert close_to(await backend.next_wake_at([("wf", 1)]), sooner.wake_at)


async def test_next_wake_at_ignores_runs_waiting_only_for_an_event(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("w", "e"),))).ok
    stored = await backend.get_run(held.run.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_at is None
    now = await backend.now()
    found = await backend.next_wake_at([("wf", 1)])
    # "None (nothing scheduled)": an event-only wait has no due time.
    assert found is None or found > now + timedelta(days=365), found


async def test_running_run_becomes_due_when_its_lease_expires(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend, lease=30)
    expected = held.now + timedelta(seconds=30)
    found = await backend.next_wake_at([("wf", 1)])
    assert close_to(found, expected, tol=_TOL)
    assert await claim(backend, worker="w2") == []
    await skip_clock(backend, 30)
    again = await claim_one(backend, worker="w2")
    assert again.run.id == held.run.id
    assert again.now >= expected


async def test_two_instances_racing_for_expired_leases_reclaim_each_once(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    ids = {(await create(backend, input=i)).id for i in range(30)}
    first = await claim(backend, worker="dead", lease=30, limit=30)
    assert {c.run.id for c in first} == ids
    await skip_clock(backend, 30)

    async def claimer(instance: Backend, worker: str) -> list[Claim]:
        mine: list[Claim] = []
        while True:
            got = await claim(instance, worker=worker, lease=60, limit=4)
            if not got:
                return mine
            mine.extend(got)

    results = await asyncio.gather(
        *(claimer(backend if i % 2 else other, f"w{i}") for i in range(6))
    )
    claims = [c for batch in results for c in batch]
    assert sorted(c.run.id for c in claims) == sorted(ids)
    assert all(c.lease_token != 0 and c.recovered for c in claims)
    for run_id in list(ids)[:5]:
        assert (await event_types(backend, run_id)).count("lease_expired") == 1


# --------------------------------------------------------------------------- defer_unavailable


async def _defer(
    backend: Backend,
    workflows: tuple[tuple[str, int], ...] = (("wf", 1),),
    grace: float = 5.0,
    limit: int = 100,
    worker: str = "w1",
) -> list[str]:
    return await backend.defer_unavailable(DeferParams(worker, workflows, grace, limit))


async def test_defer_unavailable_parks_due_runs_of_unserved_versions(backend: Backend) -> None:
    now = await backend.now()
    old = now - timedelta(seconds=30)
    v2 = (await backend.create_run(new_run("wf", 2, run_at=old))).run
    served = await create(backend, run_at=old)  # (wf, 1) is served
    other_name = (await backend.create_run(new_run("other", 2, run_at=old))).run
    fresh = (await backend.create_run(new_run("wf", 3))).run  # due, but not for 5 s yet
    future = (await backend.create_run(new_run("wf", 4, run_at=now + timedelta(hours=1)))).run
    ended = (await backend.create_run(new_run("wf", 5, run_at=old))).run
    assert await backend.cancel_run(ended.id)

    before = await backend.now()
    deferred = await _defer(backend, worker="w-old")
    after = await backend.now()
    assert deferred == [v2.id]

    stored = await backend.get_run(v2.id)
    assert stored is not None
    assert (stored.status, stored.wake_reason, stored.version) == ("waiting", "version", 2)
    assert stored.wake_at is not None
    slack = timedelta(milliseconds=5)
    assert before + timedelta(seconds=5) - slack <= stored.wake_at
    assert stored.wake_at <= after + timedelta(seconds=5) + slack
    events = await backend.get_events(v2.id)
    assert events[-1].type == "version_unavailable"
    assert events[-1].data["worker"] == "w-old"
    assert events[-1].data["version"] == 2
    assert events[-1].data["retry_in"] == 5

    for run_id, status in (
        (served.id, "pending"),
        (other_name.id, "pending"),
        (fresh.id, "pending"),
        (future.id, "pending"),
        (ended.id, "cancelled"),
    ):
        run = await backend.get_run(run_id)
        assert run is not None
        assert run.status == status, run_id
        assert "version_unavailable" not in await event_types(backend, run_id)
    # A worker that serves version 2 can still take it once it is due.
    assert await claim(backend, workflows=(("wf", 2),)) == []


async def test_defer_unavailable_backs_off_exponentially_up_to_300s(backend: Backend) -> None:
    v2 = (await backend.create_run(new_run("wf", 2))).run
    served = (("wf", 2),)
    delays = []
    for i in range(8):
        # A worker serving version 2 parks it on a wait, due at once...
        held = await claim_one(backend, worker="w2", workflows=served)
        past = (await backend.now()) - timedelta(seconds=1)
        wait = WaitWrite(f"k{i}", "poke")
        assert (await transition(backend, held, Park("event", past), waits=(wait,))).ok
        # ... a worker without version 2 defers it ...
        assert await _defer(backend, grace=0) == [v2.id]
        stored = await backend.get_run(v2.id)
        assert stored is not None
        now = await backend.now()
        assert stored.wake_at is not None
        delays.append(round((stored.wake_at - now).total_seconds()))
        # ... and a signal makes it due again.
        assert await backend.deliver_signal(v2.id, "poke", js(i)) == "resolved"
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300]
    events = await backend.get_events(v2.id)
    retry_in = [e.data["retry_in"] for e in events if e.type == "version_unavailable"]
    assert retry_in == [5, 10, 20, 40, 80, 160, 300, 300]
    stored = await backend.get_run(v2.id)
    assert stored is not None
    assert stored.status == "waiting"  # never failed


async def test_defer_unavailable_respects_limit_and_served_names(backend: Backend) -> None:
    ids = [(await backend.create_run(new_run("wf", 2))).run.id for _ in range(5)]
    await backend.create_run(new_run("elsewhere", 2))
    first = await _defer(backend, grace=0, limit=2)
    second = await _defer(backend, grace=0, limit=2)
    third = await _defer(backend, grace=0, limit=2)
    assert len(first) == 2
    assert len(second) == 2
    assert len(third) == 1
    assert sorted(first + second + third) == sorted(ids)
    assert await _defer(backend, grace=0) == []
    assert await _defer(backend, workflows=(), grace=0) == []


async def test_defer_unavailable_takes_expired_leases_not_live_ones(backend: Backend) -> None:
    live = (await backend.create_run(new_run("wf", 2))).run
    live_claim = await claim_one(backend, worker="w2", lease=60, workflows=(("wf", 2),))
    assert live_claim.run.id == live.id
    dead = (await backend.create_run(new_run("wf", 2))).run
    dead_claim = await claim_one(backend, worker="w3", lease=30, workflows=(("wf", 2),))
    assert dead_claim.run.id == dead.id
    await skip_clock(backend, 30)  # the live holder's 60 s lease has 30 s left

    assert await _defer(backend, grace=0) == [dead.id]
    stored = await backend.get_run(dead.id)
    assert stored is not None
    assert (stored.status, stored.wake_reason) == ("waiting", "version")
    # The dead holder is fenced out; the live holder keeps its lease.
    assert (await transition(backend, dead_claim, Complete(js("zombie")))).ok is False
    assert await backend.extend_leases("w3", [(dead.id, dead_claim.lease_token)], 30) == set()
    assert await backend.extend_leases("w2", [(live.id, live_claim.lease_token)], 30) == {live.id}
    assert (await transition(backend, live_claim, Complete(js("ok")))).ok


async def test_claim_racing_cancel_never_leaves_a_writable_cancelled_run(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    for i in range(10):
        workflows = ((f"race{i}", 1),)
        run = await create(backend, f"race{i}")
        if i % 2:
            claims, cancelled = await asyncio.gather(
                claim(backend, workflows=workflows), other.cancel_run(run.id)
            )
        else:
            cancelled, claims = await asyncio.gather(
                other.cancel_run(run.id), claim(backend, workflows=workflows)
            )
        assert cancelled is True
        stored = await backend.get_run(run.id)
        assert stored is not None
        assert stored.status == "cancelled"
        for held in claims:
            result = await transition(backend, held, Complete(js("late")))
            assert result.ok is False
        assert await claim(backend, workflows=workflows) == []


async def test_release_orphans_frees_runs_leased_to_a_worker_that_does_not_hold_them(
    backend: Backend,
) -> None:
    kept, lost, other = [await create(backend) for _ in range(3)]
    held = {c.run.id: c for c in await claim(backend, worker="w-a", lease=60, limit=2)}
    assert set(held) == {kept.id, lost.id}
    theirs = await claim_one(backend, worker="w-b", lease=60)
    assert theirs.run.id == other.id

    # w-a's claim of `lost` was answered to nobody: w-a holds only `kept`.
    assert await backend.release_orphans("w-a", [kept.id]) == 1
    again = await claim_one(backend, worker="w-a", lease=60)
    assert again.run.id == lost.id
    assert again.lease_token != held[lost.id].lease_token
    assert await backend.release_orphans("w-a", [kept.id, lost.id]) == 0
    # Neither w-a's live run nor another worker's run was touched.
    assert await backend.extend_leases("w-a", [(kept.id, held[kept.id].lease_token)], 60) == {
        kept.id
    }
    assert await claim(backend, worker="w-c") == []
