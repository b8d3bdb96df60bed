"""Contract: apply (fencing, journal upserts, outcomes, children), extend_leases."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.errors import PerdureError
from perdure.records import (
    Claim,
    Complete,
    EventWrite,
    Fail,
    Park,
    Release,
    Retry,
    StepWrite,
    Transition,
    WaitWrite,
    WorkerInfo,
)

from .helpers import (
    BackendFactory,
    claim,
    claim_eventually,
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

CHILD = (("child", 1),)
ERROR = {"type": "Boom", "message": "it broke"}


async def _snapshot(backend: Backend, run_id: str) -> tuple[Any, ...]:
    run = await backend.get_run(run_id)
    assert run is not None
    steps = await backend.get_steps(run_id)
    events = await backend.get_events(run_id)
    return (run.status, run.output, run.error, run.attempt, run.wake_reason, steps, events)


# --------------------------------------------------------------------------- fencing


async def test_stale_token_is_rejected_and_writes_nothing(backend: Backend) -> None:
    run = await create(backend)
    zombie = await claim_one(backend, worker="w-old", lease=30)
    await skip_clock(backend, 30)
    current = await claim_one(backend, worker="w-new", lease=30)
    assert current.lease_token != zombie.lease_token
    before = await _snapshot(backend, run.id)

    child = new_run("child", input={"from": "zombie"}, parent_id=run.id, parent_step="c")
    stale = Transition(
        run.id,
        zombie.lease_token,
        steps=(completed("s", "zombie"),),
        events=(EventWrite("step_failed", {"step": "s"}),),
        waits=(WaitWrite("w", "e"),),
        children=(child,),
        step_attempts=5,
        outcome=Complete(js("zombie")),
    )
    results = await backend.apply([stale])
    assert len(results) == 1
    assert results[0].ok is False
    assert results[0].existing == ()

    assert await _snapshot(backend, run.id) == before
    assert await backend.get_run(child.id) is None
    assert await backend.get_steps(run.id) == []
    # The current holder still holds the lease and its counters are untouched.
    assert await backend.extend_leases("w-new", [(run.id, current.lease_token)], 30) == {run.id}
    assert (await transition(backend, current, Release())).ok
    again = await claim_one(backend)
    assert again.step_attempts == 0
    assert again.journal == ()
    assert again.waits == ()


async def test_fence_checks_token_and_running_status(backend: Backend) -> None:
    # Pending (never claimed): token 0 does not pass, the run is not running.
    pending = await create(backend, "other")
    before = await _snapshot(backend, pending.id)
    result = await backend.apply(
        [Transition(pending.id, 0, steps=(completed("s"),), outcome=Complete(js(1)))]
    )
    assert [r.ok for r in result] == [False]
    assert await _snapshot(backend, pending.id) == before

    # Running, wrong token (a future one).
    await create(backend)
    held = await claim_one(backend)
    before = await _snapshot(backend, held.run.id)
    result = await backend.apply(
        [Transition(held.run.id, held.lease_token + 1, outcome=Complete(js(1)))]
    )
    assert [r.ok for r in result] == [False]
    assert await _snapshot(backend, held.run.id) == before

    # Waiting (released): the old token no longer writes.
    assert (await transition(backend, held, Release())).ok
    before = await _snapshot(backend, held.run.id)
    assert (await transition(backend, held, Complete(js(1)))).ok is False
    assert await _snapshot(backend, held.run.id) == before

    # Completed: a late write of the holder changes nothing.
    again = await claim_one(backend)
    assert (await transition(backend, again, Complete(js("first")))).ok
    before = await _snapshot(backend, again.run.id)
    late = await transition(backend, again, Fail(ERROR), steps=(completed("late"),))
    assert late.ok is False
    assert await _snapshot(backend, again.run.id) == before

    # Cancelled while held: the holder is fenced out.
    await create(backend)
    held = await claim_one(backend)
    assert await backend.cancel_run(held.run.id) is True
    before = await _snapshot(backend, held.run.id)
    assert (await transition(backend, held, steps=(completed("s"),))).ok is False
    assert await _snapshot(backend, held.run.id) == before


async def test_batch_applies_each_transition_on_its_own(backend: Backend) -> None:
    ids = [(await create(backend, input=i)).id for i in range(3)]
    claims = {c.run.id: c for c in await claim(backend, limit=3)}
    a, b, c = (claims[i] for i in ids)

    results = await backend.apply(
        [
            Transition(
                b.run.id,
                b.lease_token + 1,  # fenced out
                steps=(completed("b-step", "b"),),
                outcome=Complete(js("b")),
            ),
            Transition(
                a.run.id,
                a.lease_token,
                steps=(completed("a-step", "a"),),
                outcome=Complete(js("a")),
            ),
            Transition(
                c.run.id,
                c.lease_token,
                steps=(completed("c-step", "c"),),
                outcome=Park("sleep", (await backend.now()) + timedelta(hours=1)),
            ),
        ]
    )
    assert [r.ok for r in results] == [False, True, True]

    run_a, run_b, run_c = [await backend.get_run(i) for i in ids]
    assert run_a is not None
    assert run_b is not None
    assert run_c is not None
    assert (run_a.status, run_a.output) == ("completed", "a")
    assert (run_b.status, run_b.output) == ("running", None)
    assert run_c.status == "waiting"
    assert [s.name for s in await backend.get_steps(a.run.id)] == ["a-step"]
    assert await backend.get_steps(b.run.id) == []
    assert [s.name for s in await backend.get_steps(c.run.id)] == ["c-step"]


async def test_no_outcome_keeps_the_run_running_under_the_lease(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, steps=(completed("one", 1),))).ok
    assert (await transition(backend, held, steps=(completed("two", 2),))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "running"
    assert await claim(backend, worker="w-other") == []
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == {run.id}
    assert [s.name for s in await backend.get_steps(run.id)] == ["one", "two"]


# --------------------------------------------------------------------------- journal rows


async def test_completed_row_is_final_and_reported_in_existing(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    first = await transition(backend, held, steps=(completed("s", {"v": 1}),))
    assert first.ok
    assert first.existing == ()

    second = await transition(
        backend, held, steps=(completed("s", {"v": 2}), completed("fresh", "new"))
    )
    assert second.ok
    assert [(s.name, s.status, s.output) for s in second.existing] == [("s", "completed", {"v": 1})]
    # A failed write of the same key does not replace it either.
    third = await transition(backend, held, steps=(StepWrite("s", "run", "failed", None, ERROR),))
    assert third.ok
    assert [(s.name, s.status) for s in third.existing] == [("s", "completed")]

    steps = await backend.get_steps(run.id)
    assert [(s.name, s.status, s.output) for s in steps] == [
        ("s", "completed", {"v": 1}),
        ("fresh", "completed", "new"),
    ]


async def test_failed_row_is_final(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    failed = StepWrite("s", "run", "failed", None, ERROR, attempts=3)
    assert (await transition(backend, held, steps=(failed,))).ok
    again = await transition(backend, held, steps=(completed("s", "late"),))
    assert again.ok
    assert [(s.name, s.status, s.error, s.attempts) for s in again.existing] == [
        ("s", "failed", ERROR, 3)
    ]
    steps = await backend.get_steps(run.id)
    assert [(s.status, s.output, s.error) for s in steps] == [("failed", None, ERROR)]


async def test_retrying_row_is_replaced_by_any_later_write(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    err1 = {"type": "E", "message": "first"}
    err2 = {"type": "E", "message": "second"}
    r1 = await transition(backend, held, steps=(StepWrite("s", "run", "retrying", None, err1, 1),))
    r2 = await transition(backend, held, steps=(StepWrite("s", "run", "retrying", None, err2, 2),))
    assert r1.ok
    assert r2.ok
    assert r2.existing == ()
    steps = await backend.get_steps(run.id)
    assert [(s.name, s.status, s.error, s.attempts) for s in steps] == [("s", "retrying", err2, 2)]
    r3 = await transition(backend, held, steps=(completed("s", "done", attempts=3),))
    assert r3.ok
    assert r3.existing == ()
    steps = await backend.get_steps(run.id)
    assert [(s.name, s.status, s.output, s.error, s.attempts) for s in steps] == [
        ("s", "completed", "done", None, 3)
    ]


async def test_step_fields_and_write_order(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    now = await backend.now()
    started = now - timedelta(seconds=3)
    wake = now + timedelta(hours=1)
    before = await backend.now()
    assert (
        await transition(
            backend,
            held,
            steps=(
                StepWrite("b", "run", "completed", js([1, 2]), None, 2, started),
                StepWrite("a", "sleep", "completed", js({"until": "x"}), completed_at=wake),
            ),
        )
    ).ok
    after = await backend.now()
    assert (await transition(backend, held, steps=(completed("c", None),))).ok

    steps = await backend.get_steps(run.id)
    assert [s.name for s in steps] == ["b", "a", "c"]
    b, a, c = steps
    assert (b.kind, b.status, b.output, b.error, b.attempts) == (
        "run",
        "completed",
        [1, 2],
        None,
        2,
    )
    assert close_to(b.started_at, started)
    # completed_at=None means the database's now.
    assert b.completed_at is not None
    slack = timedelta(milliseconds=5)
    assert before - slack <= b.completed_at <= after + slack
    assert (a.kind, a.output) == ("sleep", {"until": "x"})
    assert close_to(a.completed_at, wake)
    assert c.output is None
    assert c.attempts == 1


async def test_completed_rows_appear_as_step_completed_events(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (
        await transition(
            backend,
            held,
            steps=(
                completed("s1", 1),
                StepWrite("r", "run", "retrying", None, ERROR),
                StepWrite("f", "run", "failed", None, ERROR),
            ),
        )
    ).ok
    # A sleep row's completed_at is its wake-up time, and its step_completed event is
    # dated then, once that has passed (this one is due at once).
    due = await backend.now()
    sleep = StepWrite("nap", "sleep", "completed", js({"until": "now"}), completed_at=due)
    assert (await transition(backend, held, steps=(sleep,))).ok
    assert (
        await transition(
            backend,
            held,
            Complete(js("ok")),
            events=(EventWrite("compensated", {"note": "custom"}),),
        )
    ).ok
    done = await backend.now()

    events = await backend.get_events(run.id)
    step_events = [e.data for e in events if e.type == "step_completed"]
    assert step_events == [{"step": "s1", "kind": "run"}, {"step": "nap", "kind": "sleep"}]
    types = [e.type for e in events]
    assert types[:2] == ["created", "claimed"]
    assert types.index("step_completed") < types.index("completed")
    assert [e.data for e in events if e.type == "compensated"] == [{"note": "custom"}]
    assert all(e.created_at <= done for e in events), "an event is dated in the future"
    times = [e.created_at for e in events]
    assert times == sorted(times), "events are not oldest first"
    (nap,) = [e for e in events if e.data == {"step": "nap", "kind": "sleep"}]
    assert nap.created_at == due


async def test_a_sleep_completes_at_its_due_time_unless_the_run_ended_first(
    backend: Backend,
) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    wake = (await backend.now()) + timedelta(hours=1)
    sleep = StepWrite("nap", "sleep", "completed", js({"until": "later"}), completed_at=wake)
    assert (await transition(backend, held, steps=(sleep,))).ok
    assert (await transition(backend, held, Complete(js("ok")))).ok  # ended before waking
    await skip_clock(backend, 2 * 3600)
    events = await backend.get_events(run.id)
    assert [e for e in events if e.type == "step_completed"] == []


async def test_writing_a_key_deletes_the_wait_on_that_key(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    past = (await backend.now()) - timedelta(seconds=1)
    waits = (WaitWrite("k1", "e"), WaitWrite("k2", "e"))
    assert (await transition(backend, held, Park("event", past), waits=waits)).ok
    held = await claim_one(backend)
    assert sorted(w.key for w in held.waits) == ["k1", "k2"]
    # e.g. the wait timed out: the worker journals the key itself.
    write = StepWrite("k1", "wait", "completed", "null")
    assert (await transition(backend, held, Release(), steps=(write,))).ok
    held = await claim_one(backend)
    assert [w.key for w in held.waits] == ["k2"]
    assert [s.name for s in held.journal] == ["k1"]
    assert held.run.id == run.id


# --------------------------------------------------------------------------- outcomes


async def test_complete_ends_the_run(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event", None), waits=(WaitWrite("w", "e"),))).ok
    assert await backend.deliver_signal(run.id, "other", js(1)) == "buffered"
    await backend.deliver_signal(run.id, "e", js("go"))
    held = await claim_one(backend)
    before = await backend.now()
    output = {"total": 3, "items": ["a", "b"]}
    result = await transition(backend, held, Complete(js(output)))
    after = await backend.now()
    assert result.ok

    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "completed"
    assert stored.done
    assert stored.output == output
    assert stored.error is None
    assert stored.wake_at is None
    assert stored.completed_at is not None
    slack = timedelta(milliseconds=5)
    assert before - slack <= stored.completed_at <= after + slack
    assert (await event_types(backend, run.id))[-1] == "completed"
    # Lease cleared, nothing claimable, nothing scheduled.
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == set()
    assert await claim(backend) == []
    assert await backend.next_wake_at([("wf", 1)]) is None
    assert await backend.deliver_signal(run.id, "other", js(2)) == "ended"


async def test_fail_ends_the_run(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Fail(ERROR))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "failed"
    assert stored.done
    assert stored.error == ERROR
    assert stored.output is None
    assert stored.completed_at is not None
    assert stored.wake_at is None
    assert (await event_types(backend, run.id))[-1] == "failed"
    assert await claim(backend) == []
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == set()


async def test_retry_parks_until_wake_at_with_the_next_attempt(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    wake = (await backend.now()) + timedelta(seconds=0.3)
    assert (await transition(backend, held, Retry(wake, ERROR))).ok

    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_reason == "retry"
    assert stored.attempt == 2
    assert stored.error == ERROR
    assert close_to(stored.wake_at, wake)
    assert stored.completed_at is None
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == set()
    assert await claim(backend) == []

    again = await claim_eventually(backend, worker="w2")
    assert again.run.id == run.id
    assert again.now >= wake
    assert again.run.attempt == 2
    assert again.lease_token != held.lease_token
    assert again.recovered is False


async def test_release_makes_the_run_claimable_at_once(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend, worker="w1")
    assert (await transition(backend, held, Release(), steps=(completed("s", 1),))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_reason is None
    assert stored.wake_at is not None
    assert stored.wake_at <= await backend.now()
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == set()

    other = await claim_one(backend, worker="w2")
    assert other.run.id == run.id
    assert other.lease_token != held.lease_token
    assert other.recovered is False
    assert [s.name for s in other.journal] == ["s"]


async def test_park_waits_until_wake_at(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    wake = (await backend.now()) + timedelta(seconds=0.3)
    assert (await transition(backend, held, Park("sleep", wake))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_reason == "sleep"
    assert close_to(stored.wake_at, wake)
    assert (await event_types(backend, run.id))[-1] == "waiting"
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == set()
    assert await claim(backend) == []
    again = await claim_eventually(backend)
    assert again.now >= wake
    assert again.run.wake_reason is None


async def test_park_available_at_is_the_earliest_of_wake_timeouts_and_deadline(
    backend: Backend,
) -> None:
    now = await backend.now()

    def at(seconds: float | None) -> datetime | None:
        return None if seconds is None else now + timedelta(seconds=seconds)

    # (park wake_at, wait timeouts, run deadline, expected wake_at)
    cases: list[tuple[float | None, list[float | None], float | None, float | None]] = [
        (600, [300], 450, 300),
        (None, [], 200, 200),
        (100, [300, 400], None, 100),
        (None, [500, 400], 900, 400),
        (700, [None], 150, 150),
        (None, [None], None, None),
        (None, [], None, None),
        (250, [], None, 250),
        (None, [None, 350], None, 350),
    ]
    problems = []
    for wake, timeouts, deadline, expected in cases:
        run = await create(backend, deadline_at=at(deadline))
        held = await claim_one(backend)
        assert held.run.id == run.id
        waits = tuple(WaitWrite(f"k{i}", "e", None, at(t)) for i, t in enumerate(timeouts))
        assert (await transition(backend, held, Park("event", at(wake)), waits=waits)).ok
        stored = await backend.get_run(run.id)
        assert stored is not None
        want = at(expected)
        ok = stored.wake_at is None if want is None else close_to(stored.wake_at, want)
        if not ok:
            problems.append(
                f"wake_at={wake} timeouts={timeouts} deadline={deadline}: expected "
                f"now+{expected}, got {stored.wake_at and stored.wake_at - now}"
            )
    assert not problems, "\n".join(problems)


async def test_park_wait_timeout_makes_the_run_claimable(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    timeout_at = (await backend.now()) + timedelta(seconds=0.3)
    wait = WaitWrite("w", "never", None, timeout_at)
    assert (await transition(backend, held, Park("event"), waits=(wait,))).ok
    assert await claim(backend) == []
    again = await claim_eventually(backend)
    assert again.run.id == run.id
    assert again.now >= timeout_at
    assert [w.key for w in again.waits] == ["w"]


async def test_park_on_a_wait_whose_key_is_journaled_is_due_now(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    write = StepWrite("w", "wait", "completed", js({"got": 1}))
    assert (
        await transition(backend, held, Park("event"), steps=(write,), waits=(WaitWrite("w", "e"),))
    ).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_at is not None
    assert stored.wake_at <= await backend.now()
    again = await claim_one(backend)
    assert again.run.id == run.id
    assert [(s.name, s.output) for s in again.journal] == [("w", {"got": 1})]


async def test_park_keeps_an_existing_wait_on_the_same_key(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    now = await backend.now()
    t1 = now + timedelta(hours=1)
    t2 = now + timedelta(hours=2)
    first = WaitWrite("k", "e1", js({"a": 1}), t1)
    assert (await transition(backend, held, Park("event", now), waits=(first,))).ok
    held = await claim_one(backend)
    second = (WaitWrite("k", "e2", None, t2), WaitWrite("k2", "e3"))
    assert (await transition(backend, held, Park("event", now), waits=second)).ok
    held = await claim_one(backend)
    waits = {w.key: w for w in held.waits}
    assert set(waits) == {"k", "k2"}
    assert (waits["k"].event, waits["k"].match) == ("e1", {"a": 1})
    assert close_to(waits["k"].timeout_at, t1)
    assert (waits["k2"].event, waits["k2"].match, waits["k2"].timeout_at) == ("e3", None, None)


async def test_transition_events_and_step_attempts_are_recorded(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (
        await transition(
            backend,
            held,
            events=(EventWrite("step_retrying", {"step": "s", "attempt": 1}), EventWrite("x")),
            step_attempts=3,
        )
    ).ok
    assert (await transition(backend, held, Release(), step_attempts=2)).ok
    again = await claim_one(backend)
    assert again.step_attempts == 5
    assert (await transition(backend, again, Release())).ok
    assert (await claim_one(backend)).step_attempts == 5
    events = await backend.get_events(run.id)
    assert [(e.type, e.data) for e in events if e.type in ("step_retrying", "x")] == [
        ("step_retrying", {"step": "s", "attempt": 1}),
        ("x", None),
    ]


# --------------------------------------------------------------------------- children


async def _park_on_child(backend: Backend, held: Claim, key: str = "c") -> str:
    child = new_run("child", input={"n": 1}, parent_id=held.run.id, parent_step=key)
    result = await transition(backend, held, Park("child"), children=(child,))
    assert result.ok
    return child.id


async def test_children_are_inserted_with_their_parent(backend: Backend) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    child_id = await _park_on_child(backend, held)
    child = await backend.get_run(child_id)
    assert child is not None
    assert (child.workflow, child.status, child.input) == ("child", "pending", {"n": 1})
    assert child.parent_id == parent.id
    assert child.parent_step == "c"
    assert await event_types(backend, child_id) == ["created"]
    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_reason == "child"
    assert stored.wake_at is None
    assert await claim(backend) == []
    got = await claim_one(backend, workflows=CHILD)
    assert got.run.id == child_id


async def test_children_insert_is_idempotent_like_create_run(backend: Backend) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    key = f"~child:{parent.id}:c"
    first = new_run("child", input=1, parent_id=parent.id, parent_step="c", idempotency_key=key)
    again = new_run("child", input=1, parent_id=parent.id, parent_step="c", idempotency_key=key)
    assert (await transition(backend, held, children=(first,))).ok
    assert (await transition(backend, held, children=(again,))).ok
    assert await backend.get_run(first.id) is not None
    assert await backend.get_run(again.id) is None
    got = await claim(backend, workflows=CHILD)
    assert [c.run.id for c in got] == [first.id]


async def test_child_complete_writes_the_parent_row_and_wakes_the_parent(
    backend: Backend,
) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    child_id = await _park_on_child(backend, held)
    child = await claim_one(backend, workflows=CHILD)
    assert (await transition(backend, child, Complete(js({"sum": 10})))).ok

    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert stored.wake_at is not None
    assert stored.wake_at <= await backend.now()
    steps = await backend.get_steps(parent.id)
    assert [(s.name, s.kind, s.status, s.output) for s in steps] == [
        ("c", "child", "completed", {"sum": 10})
    ]
    woken = await claim_one(backend)
    assert woken.run.id == parent.id
    assert [(s.name, s.output) for s in woken.journal] == [("c", {"sum": 10})]
    assert child_id != parent.id


async def test_child_fail_writes_a_failed_parent_row(backend: Backend) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    child_id = await _park_on_child(backend, held, key="kid")
    child = await claim_one(backend, workflows=CHILD)
    assert (await transition(backend, child, Fail(ERROR))).ok

    steps = await backend.get_steps(parent.id)
    assert len(steps) == 1
    row = steps[0]
    assert (row.name, row.kind, row.status, row.output) == ("kid", "child", "failed", None)
    assert row.error == {**ERROR, "run_id": child_id}
    woken = await claim_one(backend)
    assert woken.run.id == parent.id
    assert woken.journal[0].status == "failed"


async def test_child_ending_while_the_parent_runs_keeps_the_parent_lease(
    backend: Backend,
) -> None:
    parent = await create(backend)
    held = await claim_one(backend, lease=30)
    child = new_run("child", input=None, parent_id=parent.id, parent_step="c")
    assert (await transition(backend, held, children=(child,))).ok  # parent keeps running
    child_claim = await claim_one(backend, workflows=CHILD)
    assert (await transition(backend, child_claim, Complete(js("early")))).ok

    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert stored.status == "running"
    assert [(s.name, s.output) for s in await backend.get_steps(parent.id)] == [("c", "early")]
    assert await claim(backend, worker="w-other") == []
    assert await backend.extend_leases("w1", [(parent.id, held.lease_token)], 30) == {parent.id}
    assert (await transition(backend, held, Complete(js("done")))).ok


async def test_one_batch_of_many_shapes_applies_each_in_its_runs_order(
    backend: Backend,
) -> None:
    # One commit batch: two transitions of the same run (a step, then its completion),
    # a child's end beside its running parent's own step, and a park on a wait (the
    # general shape) beside them. Each applies as if alone, in order.
    parent = await create(backend)
    other = await create(backend)
    held = {c.run.id: c for c in await claim(backend, limit=2, lease=30)}
    p, o = held[parent.id], held[other.id]
    child = new_run("child", input=None, parent_id=parent.id, parent_step="c")
    assert (await transition(backend, p, children=(child,))).ok
    kid = await claim_one(backend, workflows=CHILD)
    wait = WaitWrite("w", "go", None, None)
    results = await backend.apply(
        [
            Transition(o.run.id, o.lease_token, steps=(completed("o1", "x"),)),
            Transition(kid.run.id, kid.lease_token, outcome=Complete(js("kid"))),
            Transition(p.run.id, p.lease_token, steps=(completed("p1", "y"),)),
            Transition(
                o.run.id, o.lease_token, steps=(completed("o2", "z"),), outcome=Complete(js("o"))
            ),
            Transition(p.run.id, p.lease_token, waits=(wait,), outcome=Park("event")),
        ]
    )
    assert [r.ok for r in results] == [True] * 5
    stored_o, stored_p = await backend.get_run(o.run.id), await backend.get_run(p.run.id)
    assert stored_o is not None and stored_p is not None
    assert (stored_o.status, stored_o.output) == ("completed", "o")
    assert [s.name for s in await backend.get_steps(o.run.id)] == ["o1", "o2"]
    assert stored_p.status == "waiting"
    assert sorted((s.name, s.output) for s in await backend.get_steps(p.run.id)) == [
        ("c", "kid"),
        ("p1", "y"),
    ]


# --------------------------------------------------------------------------- leases


async def test_extend_leases_returns_only_the_leases_still_held(backend: Backend) -> None:
    ids = [(await create(backend, input=i)).id for i in range(5)]
    claims = {c.run.id: c for c in await claim(backend, worker="w1", limit=5)}
    a, b, c, d, e = (claims[i] for i in ids)
    assert (await transition(backend, c, Complete(js(1)))).ok
    assert (await transition(backend, d, Release())).ok
    assert await backend.cancel_run(e.run.id) is True

    held = [
        (a.run.id, a.lease_token),
        (b.run.id, b.lease_token + 1),  # wrong token
        (c.run.id, c.lease_token),  # completed
        (d.run.id, d.lease_token),  # released (and maybe re-claimed below)
        (e.run.id, e.lease_token),  # cancelled
    ]
    taken = await claim_one(backend, worker="w2")
    assert taken.run.id == d.run.id
    assert await backend.extend_leases("w1", held, 30) == {a.run.id}
    assert await backend.extend_leases("w1", [], 30) == set()


async def test_renewing_a_lease_keeps_the_run_from_being_reclaimed(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend, worker="w1", lease=0.5)
    hold_until = held.now + timedelta(seconds=1.5)
    while True:
        renewed = await backend.extend_leases("w1", [(run.id, held.lease_token)], 0.5)
        assert renewed == {run.id}
        assert await claim(backend, worker="w2") == []
        now = await backend.now()
        if now > hold_until:
            break
        await clock_passes(backend, now + timedelta(seconds=0.05))
    # Past the original lease by a wide margin and still held.
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "running"
    # Once renewals stop, another worker takes it over.
    other = await claim_eventually(backend, worker="w2")
    assert other.run.id == run.id
    assert other.lease_token != held.lease_token
    assert other.recovered is True


async def test_extend_leases_touches_the_worker(backend: Backend) -> None:
    now = await backend.now()
    await backend.register_worker(WorkerInfo("w1", "host", 1, ("wf",), 4, now, now))
    [before] = await backend.list_workers(60)
    run = await create(backend)
    held = await claim_one(backend, worker="w1")
    await clock_passes(backend, before.last_seen_at)
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == {run.id}
    [after] = await backend.list_workers(60)
    assert after.last_seen_at > before.last_seen_at


# --------------------------------------------------------------------------- races


async def test_cancel_racing_complete_ends_the_run_exactly_once(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    for i in range(10):
        run = await create(backend, f"race{i}")
        held = await claim_one(backend, workflows=((f"race{i}", 1),))
        finish = transition(backend, held, Complete(js("done")), steps=(completed("s", 1),))
        cancel = other.cancel_run(run.id)
        if i % 2:
            result, cancelled = await asyncio.gather(finish, cancel)
        else:
            cancelled, result = await asyncio.gather(cancel, finish)
        stored = await backend.get_run(run.id)
        assert stored is not None
        types = await event_types(backend, run.id)
        if result.ok:
            assert cancelled is False
            assert (stored.status, stored.output) == ("completed", "done")
            assert "cancelled" not in types
            assert types.count("completed") == 1
        else:
            assert cancelled is True
            assert stored.status == "cancelled"
            assert stored.output is None
            assert await backend.get_steps(run.id) == []
            assert "completed" not in types
            assert types.count("cancelled") == 1


async def test_child_ending_after_its_parent_ended_does_not_revive_the_parent(
    backend: Backend,
) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    kids = (
        new_run("child", input=1, parent_id=parent.id, parent_step="c1"),
        new_run("child", input=2, parent_id=parent.id, parent_step="c2"),
    )
    assert (await transition(backend, held, Complete(js("parent done")), children=kids)).ok
    first = await claim_one(backend, workflows=CHILD)
    assert (await transition(backend, first, Complete(js("late")))).ok
    second = await claim_one(backend, workflows=CHILD)
    assert (await transition(backend, second, Fail(ERROR))).ok
    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert (stored.status, stored.output) == ("completed", "parent done")
    assert stored.wake_at is None
    assert await claim(backend) == []
    assert await backend.next_wake_at([("wf", 1)]) is None


async def test_unknown_step_status_is_rejected_and_nothing_written(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    before = await _snapshot(backend, run.id)
    bogus = StepWrite("s", "run", "bogus", js(1))
    with pytest.raises(PerdureError):
        await transition(backend, held, Complete(js(1)), steps=(bogus,))
    assert await _snapshot(backend, run.id) == before
    # The backend is still usable and the lease still held.
    assert (await transition(backend, held, Complete(js(2)))).ok


async def test_apply_of_nothing_is_nothing(backend: Backend) -> None:
    assert await backend.apply([]) == []


async def test_extend_leases_moves_the_expiry(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend, lease=5)
    assert await backend.extend_leases("w1", [(held.run.id, held.lease_token)], 600) == {
        held.run.id
    }
    now = await backend.now()
    found = await backend.next_wake_at([("wf", 1)])
    assert found is not None
    assert now + timedelta(seconds=590) <= found <= now + timedelta(seconds=600)


async def test_one_transition_writing_a_key_twice(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    retry_then_done = (
        StepWrite("r", "run", "retrying", None, ERROR, 1),
        completed("r", "done", attempts=2),
    )
    done_twice = (completed("d", "first"), completed("d", "second"))
    assert (await transition(backend, held, steps=retry_then_done + done_twice)).ok
    steps = {s.name: s for s in await backend.get_steps(run.id)}
    assert (steps["r"].status, steps["r"].output, steps["r"].attempts) == ("completed", "done", 2)
    assert (steps["d"].status, steps["d"].output) == ("completed", "first")


async def test_retry_wakes_at_its_wake_at(backend: Backend) -> None:
    now = await backend.now()
    run = await create(backend, deadline_at=now + timedelta(minutes=10))
    held = await claim_one(backend)
    wake = now + timedelta(minutes=30)
    assert (await transition(backend, held, Retry(wake, ERROR))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    # "Retry: ... available_at = the earlier of wake_at and deadline_at".
    assert close_to(stored.wake_at, now + timedelta(minutes=10))

    # A deadline after wake_at leaves wake_at alone.
    later = await create(backend, "late", deadline_at=now + timedelta(hours=2))
    held = await claim_one(backend, workflows=(("late", 1),))
    assert (await transition(backend, held, Retry(wake, ERROR))).ok
    stored = await backend.get_run(later.id)
    assert stored is not None
    assert close_to(stored.wake_at, wake)


async def test_an_expired_lease_not_yet_taken_over_can_still_be_renewed(
    backend: Backend,
) -> None:
    run = await create(backend)
    held = await claim_one(backend, lease=30)
    await skip_clock(backend, 31)
    # Still running under the same token: held, so renewed.
    assert await backend.extend_leases("w1", [(run.id, held.lease_token)], 30) == {run.id}
    assert await claim(backend, worker="w2") == []
    assert (await transition(backend, held, Complete(js("ok")))).ok
