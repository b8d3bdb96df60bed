"""Contract: deliver_signal, waits and buffering, JSON containment, publish, topic
subscriptions, cancel_run."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.errors import RunNotFound
from perdure.ids import new_run_id
from perdure.records import (
    Claim,
    Complete,
    Park,
    Published,
    Release,
    WaitWrite,
    WorkflowRecord,
)

from .helpers import (
    BackendFactory,
    claim,
    claim_one,
    create,
    event_types,
    js,
    new_run,
    park_waiting,
    transition,
)

pytestmark = pytest.mark.timeout(60)

CHILD = (("child", 1),)


async def _is_due_now(backend: Backend, run_id: str) -> bool:
    run = await backend.get_run(run_id)
    assert run is not None
    return run.wake_at is not None and run.wake_at <= await backend.now()


async def _waiting_run(
    backend: Backend, workflow: str = "wf", key: str = "w", event: str = "e", match: Any = None
) -> Claim:
    """A run parked on one wait (returns the claim it was parked from)."""
    await create(backend, workflow)
    held = await claim_one(backend, workflows=((workflow, 1),))
    await park_waiting(backend, held, key, event, match)
    return held


# --------------------------------------------------------------------------- deliver_signal


async def test_signal_before_the_wait_is_buffered_then_consumed_at_park(backend: Backend) -> None:
    run = await create(backend)
    assert await backend.deliver_signal(run.id, "approve", js({"by": "ann"})) == "buffered"
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "pending"
    assert await backend.get_steps(run.id) == []

    held = await claim_one(backend)
    result = await transition(backend, held, Park("event"), waits=(WaitWrite("ok", "approve"),))
    assert result.ok
    # The wait is satisfiable at once: consumed into a completed row, claimable now.
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert await _is_due_now(backend, run.id)
    steps = await backend.get_steps(run.id)
    assert [(s.name, s.kind, s.status, s.output) for s in steps] == [
        ("ok", "wait", "completed", {"by": "ann"})
    ]
    again = await claim_one(backend)
    assert again.run.id == run.id
    assert again.waits == ()
    assert [(s.name, s.output) for s in again.journal] == [("ok", {"by": "ann"})]


async def test_buffered_signals_are_consumed_oldest_first_once_each(backend: Backend) -> None:
    run = await create(backend)
    for n in (1, 2):
        assert await backend.deliver_signal(run.id, "e", js({"n": n})) == "buffered"
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("a", "e"),))).ok
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("b", "e"),))).ok
    held = await claim_one(backend)
    assert [(s.name, s.output) for s in held.journal] == [("a", {"n": 1}), ("b", {"n": 2})]
    # Both were consumed: a third wait does not see a stale copy.
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("c", "e"),))).ok
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.wake_at is None
    assert await claim(backend) == []


async def test_signal_to_a_waiting_run_resolves_the_wait(backend: Backend) -> None:
    held = await _waiting_run(backend, key="pay", event="paid", match={"order": 7})
    run_id = held.run.id
    assert not await _is_due_now(backend, run_id)
    assert await claim(backend) == []

    payload = {"order": 7, "amount": 12.5}
    assert await backend.deliver_signal(run_id, "paid", js(payload)) == "resolved"
    steps = await backend.get_steps(run_id)
    assert [(s.name, s.kind, s.status, s.output) for s in steps] == [
        ("pay", "wait", "completed", payload)
    ]
    assert "signaled" in await event_types(backend, run_id)
    assert await _is_due_now(backend, run_id)
    again = await claim_one(backend)
    assert again.run.id == run_id
    assert again.waits == ()  # the wait was deleted
    # A second identical signal finds no wait: it is buffered, not resolved twice.
    assert await backend.deliver_signal(run_id, "paid", js(payload)) == "buffered"
    assert len(await backend.get_steps(run_id)) == 1


async def test_signal_resolves_the_oldest_matching_wait_first(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    past = (await backend.now()) - timedelta(seconds=1)
    assert (await transition(backend, held, Park("event", past), waits=(WaitWrite("a", "e"),))).ok
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("b", "e"),))).ok
    run_id = held.run.id
    assert await backend.deliver_signal(run_id, "e", js(1)) == "resolved"
    assert [(s.name, s.output) for s in await backend.get_steps(run_id)] == [("a", 1)]
    assert await backend.deliver_signal(run_id, "e", js(2)) == "resolved"
    assert [(s.name, s.output) for s in await backend.get_steps(run_id)] == [("a", 1), ("b", 2)]


async def test_signal_to_a_running_run_resolves_without_waking_it(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    past = (await backend.now()) - timedelta(seconds=1)
    assert (await transition(backend, held, Park("event", past), waits=(WaitWrite("w", "e"),))).ok
    held = await claim_one(backend, lease=30)  # running, with the wait still registered
    assert [w.key for w in held.waits] == ["w"]
    assert await backend.deliver_signal(held.run.id, "e", js("hi")) == "resolved"
    stored = await backend.get_run(held.run.id)
    assert stored is not None
    assert stored.status == "running"
    assert [(s.name, s.output) for s in await backend.get_steps(held.run.id)] == [("w", "hi")]
    assert await claim(backend, worker="w2") == []
    assert (await transition(backend, held, Complete(js("done")))).ok


async def test_non_matching_signal_never_resolves_and_is_buffered(backend: Backend) -> None:
    held = await _waiting_run(backend, key="w", event="e", match={"kind": "x"})
    run_id = held.run.id
    assert await backend.deliver_signal(run_id, "e", js({"kind": "y", "n": 1})) == "buffered"
    assert await backend.deliver_signal(run_id, "e", js({"kind": "y", "n": 2})) == "buffered"
    assert await backend.deliver_signal(run_id, "other", js({"kind": "x"})) == "buffered"
    assert await backend.get_steps(run_id) == []
    assert not await _is_due_now(backend, run_id)
    assert await claim(backend) == []

    assert await backend.deliver_signal(run_id, "e", js({"kind": "x", "n": 3})) == "resolved"
    held = await claim_one(backend)
    assert [(s.name, s.output) for s in held.journal] == [("w", {"kind": "x", "n": 3})]
    # The buffered non-matching signals wait for a wait they match (oldest first).
    wait = WaitWrite("w2", "e", js({"kind": "y"}))
    assert (await transition(backend, held, Park("event"), waits=(wait,))).ok
    assert await _is_due_now(backend, run_id)
    steps = await backend.get_steps(run_id)
    assert [(s.name, s.output) for s in steps] == [
        ("w", {"kind": "x", "n": 3}),
        ("w2", {"kind": "y", "n": 1}),
    ]


async def test_signal_to_an_ended_run_stores_nothing(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Complete(js("out")))).ok
    events = await backend.get_events(run.id)
    assert await backend.deliver_signal(run.id, "e", js(1)) == "ended"
    assert await backend.get_events(run.id) == events
    assert await backend.get_steps(run.id) == []

    cancelled = await create(backend)
    assert await backend.cancel_run(cancelled.id) is True
    events = await backend.get_events(cancelled.id)
    assert await backend.deliver_signal(cancelled.id, "e", js(1)) == "ended"
    assert await backend.get_events(cancelled.id) == events


async def test_signal_to_an_unknown_run_raises(backend: Backend) -> None:
    with pytest.raises(RunNotFound):
        await backend.deliver_signal(new_run_id(), "e", js(1))


# --------------------------------------------------------------------------- containment

# (payload, match, contained?) under Postgres `@>` semantics.
CONTAINMENT: list[tuple[Any, Any, bool]] = [
    ({"a": 1, "b": 2}, {"a": 1}, True),
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ({"a": 1}, {}, True),
    ({}, {}, True),
    ({"a": {"b": {"c": 1, "d": 2}, "e": 3}}, {"a": {"b": {"c": 1}}}, True),
    ({"a": {"b": 1}}, {"a": {"b": 2}}, False),
    ({"a": {"b": 1}}, {"a": {"b": 1, "c": None}}, False),
    ({"tags": ["x", "y", "z"]}, {"tags": ["z", "x"]}, True),
    ({"tags": ["x"]}, {"tags": ["x", "y"]}, False),
    ({"tags": ["x"]}, {"tags": ["x", "x"]}, True),
    ({"tags": ["x", "y"]}, {"tags": []}, True),
    ({"items": [{"id": 1, "n": "a"}, {"id": 2}]}, {"items": [{"id": 1}]}, True),
    ({"items": [{"id": 1}, {"id": 2}]}, {"items": [{"id": 1, "n": "a"}]}, False),
    ({"m": [[1, 2], [3]]}, {"m": [[2]]}, True),
    ({"a": [1, 2]}, {"a": 1}, False),
    ({"a": {"b": 1}}, {"a": [{"b": 1}]}, False),
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 1.0}, {"a": 1}, True),
    ({"a": 100}, {"a": 1e2}, True),
    ({"a": 1.5}, {"a": 1}, False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": 1}, {"a": "1"}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": 0}, {"a": False}, False),
    ({"a": True}, {"a": True}, True),
    ({"a": None}, {"a": None}, True),
    ({"a": 1}, {"a": None}, False),
    ({}, {"a": None}, False),
    ({"a": None}, {"a": False}, False),
    ({"s": "x"}, {"s": "X"}, False),
    ({"s": "héllo ✓ 🎉"}, {"s": "héllo ✓ 🎉"}, True),
    ({"big": 12345678901234567890}, {"big": 12345678901234567890}, True),
    ({"big": 12345678901234567890}, {"big": 12345678901234567891}, False),
    ("text", "text", True),
    (5, 5, True),
    (5, 6, False),
    ([1, 2, 3], [3, 1], True),
    ([1, 2, 3], [4], False),
    ({"a": 1}, [{"a": 1}], False),
]


async def test_wait_match_uses_json_containment(backend: Backend) -> None:
    problems = []
    for i, (payload, match, expected) in enumerate(CONTAINMENT):
        workflow = f"case{i}"
        held = await _waiting_run(backend, workflow, key="w", event="e", match=match)
        outcome = await backend.deliver_signal(held.run.id, "e", js(payload))
        want = "resolved" if expected else "buffered"
        if outcome != want:
            problems.append(f"payload {payload!r} / match {match!r}: {outcome}, expected {want}")
    assert not problems, "\n".join(problems)


async def test_wait_without_match_accepts_any_payload(backend: Backend) -> None:
    payloads: list[Any] = [None, 0, "", [], {}, {"a": [1]}]
    for i, payload in enumerate(payloads):
        held = await _waiting_run(backend, f"any{i}", match=None)
        assert await backend.deliver_signal(held.run.id, "e", js(payload)) == "resolved"
        steps = await backend.get_steps(held.run.id)
        assert [s.output for s in steps] == [payload]


# --------------------------------------------------------------------------- publish


async def test_publish_resolves_matching_waits_and_starts_subscribers(backend: Backend) -> None:
    await backend.register_workflows(
        [
            WorkflowRecord("wf", 1),
            WorkflowRecord("on_order", 1),
            WorkflowRecord("on_order", 3),
            WorkflowRecord("on_order", 2),
            WorkflowRecord("unrelated", 1),
        ]
    )
    assert await backend.subscribe_topic("order.*", "on_order") is True
    assert await backend.subscribe_topic("invoice.*", "unrelated") is True

    matching = [
        (await _waiting_run(backend, f"m{i}", event="order.created", match=match)).run.id
        for i, match in enumerate([{"id": 1}, None, {"lines": [{"sku": "a"}]}])
    ]
    other_match = (await _waiting_run(backend, "x1", event="order.created", match={"id": 2})).run.id
    other_event = (await _waiting_run(backend, "x2", event="order.paid")).run.id
    idle = await create(backend, "x3")  # live, no wait: publish buffers nothing

    payload = {"id": 1, "lines": [{"sku": "a", "qty": 2}, {"sku": "b"}]}
    published = await backend.publish("order.created", js(payload))
    assert isinstance(published, Published)
    assert set(published.resumed) == set(matching)
    assert len(published.resumed) == len(matching)
    assert len(published.started) == 1

    started = await backend.get_run(published.started[0])
    assert started is not None
    assert (started.workflow, started.version, started.status) == ("on_order", 3, "pending")
    assert started.input == payload
    assert await event_types(backend, started.id) == ["created"]
    got = await claim_one(backend, workflows=(("on_order", 3),))
    assert got.run.id == started.id

    for run_id in matching:
        assert "signaled" in await event_types(backend, run_id)
        steps = await backend.get_steps(run_id)
        assert [(s.name, s.kind, s.status, s.output) for s in steps] == [
            ("w", "wait", "completed", payload)
        ]
        assert await _is_due_now(backend, run_id)
    for run_id in (other_match, other_event):
        assert await backend.get_steps(run_id) == []
        assert not await _is_due_now(backend, run_id)

    # Nothing was buffered for the idle run: its later wait is not satisfied.
    held = await claim_one(backend, workflows=(("x3", 1),))
    assert held.run.id == idle.id
    assert (
        await transition(backend, held, Park("event"), waits=(WaitWrite("w", "order.created"),))
    ).ok
    assert not await _is_due_now(backend, idle.id)
    assert await backend.get_steps(idle.id) == []


async def test_publish_resolves_one_wait_per_run(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    past = (await backend.now()) - timedelta(seconds=1)
    assert (await transition(backend, held, Park("event", past), waits=(WaitWrite("a", "e"),))).ok
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("b", "e"),))).ok

    published = await backend.publish("e", js({"v": 1}))
    assert published.resumed == (held.run.id,)
    assert published.started == ()
    assert [(s.name, s.output) for s in await backend.get_steps(held.run.id)] == [("a", {"v": 1})]
    again = await claim_one(backend)
    assert [w.key for w in again.waits] == ["b"]


async def test_publish_with_no_takers_does_nothing(backend: Backend) -> None:
    run = await create(backend)
    assert await backend.publish("nobody.listens", js({"x": 1})) == Published((), ())
    assert await backend.get_steps(run.id) == []
    assert (await claim_one(backend)).run.id == run.id


async def test_publish_starts_one_run_per_workflow_even_if_several_patterns_match(
    backend: Backend,
) -> None:
    await backend.register_workflows([WorkflowRecord("audit", 1)])
    assert await backend.subscribe_topic("order.*", "audit")
    assert await backend.subscribe_topic("*.created", "audit")
    assert await backend.subscribe_topic("order.created", "audit")
    published = await backend.publish("order.created", js({}))
    assert len(published.started) == 1


async def test_topic_patterns_match_star_only(backend: Backend) -> None:
    # Names arrive validated (perdure.names): letters, digits, '.', '_', '-', and '*' in
    # patterns. '_' must still match only itself (it is a LIKE wildcard).
    patterns = {
        "order.*": "p_prefix",
        "*.created": "p_suffix",
        "order.created": "p_exact",
        "a_b": "p_underscore",
        "x.*.z": "p_middle",
        "*": "p_all",
    }
    await backend.register_workflows([WorkflowRecord(wf, 1) for wf in patterns.values()])
    for pattern, wf in patterns.items():
        assert await backend.subscribe_topic(pattern, wf) is True

    expected = {
        "order.created": {"p_prefix", "p_suffix", "p_exact", "p_all"},
        "order.created.v2": {"p_prefix", "p_all"},
        "orders.created": {"p_suffix", "p_all"},
        "order.": {"p_prefix", "p_all"},
        "axb": {"p_all"},
        "a_b": {"p_underscore", "p_all"},
        "x.y.w.z": {"p_middle", "p_all"},
        "x.y.zz": {"p_all"},
    }
    problems = []
    for event, want in expected.items():
        published = await backend.publish(event, js({"event": event}))
        got = set()
        for run_id in published.started:
            run = await backend.get_run(run_id)
            assert run is not None
            got.add(run.workflow)
        if got != want:
            problems.append(f"{event!r} started {sorted(got)}, expected {sorted(want)}")
    assert not problems, "\n".join(problems)


async def test_publish_idempotency_key_returns_the_first_result(backend: Backend) -> None:
    await backend.register_workflows([WorkflowRecord("sub", 1)])
    await backend.subscribe_topic("evt", "sub")
    waiter = (await _waiting_run(backend, "w1", event="evt")).run.id

    first = await backend.publish("evt", js({"n": 1}), idempotency_key="pub-1")
    assert first.resumed == (waiter,)
    assert len(first.started) == 1

    late_waiter = (await _waiting_run(backend, "w2", event="evt")).run.id
    again = await backend.publish("evt", js({"n": 2}), idempotency_key="pub-1")
    assert again == first
    assert await backend.get_steps(late_waiter) == []
    assert not await _is_due_now(backend, late_waiter)
    started = await claim(backend, workflows=(("sub", 1),))
    assert [c.run.id for c in started] == list(first.started)

    # A new key publishes again.
    third = await backend.publish("evt", js({"n": 3}), idempotency_key="pub-2")
    assert third.resumed == (late_waiter,)
    assert len(third.started) == 1
    assert third.started != first.started


# --------------------------------------------------------------------------- subscriptions


async def test_subscribe_unsubscribe_list(backend: Backend) -> None:
    assert await backend.list_subscriptions() == []
    assert await backend.subscribe_topic("b.*", "wf2") is True
    assert await backend.subscribe_topic("a.*", "wf1") is True
    assert await backend.subscribe_topic("a.*", "wf0") is True
    assert await backend.subscribe_topic("a.*", "wf1") is False
    assert await backend.list_subscriptions() == [("a.*", "wf0"), ("a.*", "wf1"), ("b.*", "wf2")]
    assert await backend.unsubscribe_topic("a.*", "wf1") is True
    assert await backend.unsubscribe_topic("a.*", "wf1") is False
    assert await backend.unsubscribe_topic("zzz", "wf1") is False
    assert await backend.list_subscriptions() == [("a.*", "wf0"), ("b.*", "wf2")]


async def test_unsubscribed_workflows_are_not_started(backend: Backend) -> None:
    await backend.register_workflows([WorkflowRecord("sub", 1)])
    await backend.subscribe_topic("t.*", "sub")
    assert len((await backend.publish("t.1", js(1))).started) == 1
    assert await backend.unsubscribe_topic("t.*", "sub") is True
    assert (await backend.publish("t.2", js(2))).started == ()


# --------------------------------------------------------------------------- cancel_run


async def test_cancel_a_live_run(backend: Backend) -> None:
    run = await create(backend)
    before = await backend.now()
    assert await backend.cancel_run(run.id) is True
    after = await backend.now()
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "cancelled"
    assert stored.done
    assert stored.wake_at is None
    assert stored.completed_at is not None
    slack = timedelta(milliseconds=5)
    assert before - slack <= stored.completed_at <= after + slack
    types = await event_types(backend, run.id)
    assert types == ["created", "cancelled"]
    assert await claim(backend) == []

    # Already ended: False, and nothing is written.
    events = await backend.get_events(run.id)
    assert await backend.cancel_run(run.id) is False
    assert await backend.get_events(run.id) == events
    stored2 = await backend.get_run(run.id)
    assert stored2 is not None
    assert stored2.completed_at == stored.completed_at


async def test_cancel_a_completed_run_is_false(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Complete(js("out")))).ok
    events = await backend.get_events(run.id)
    assert await backend.cancel_run(run.id) is False
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.output) == ("completed", "out")
    assert await backend.get_events(run.id) == events


async def test_cancel_unknown_run_raises(backend: Backend) -> None:
    with pytest.raises(RunNotFound):
        await backend.cancel_run(new_run_id())


async def test_cancel_clears_lease_waits_and_buffered_signals(backend: Backend) -> None:
    held = await _waiting_run(backend, key="w", event="e", match={"ok": True})
    run_id = held.run.id
    assert await backend.deliver_signal(run_id, "e", js({"ok": False})) == "buffered"
    assert await backend.cancel_run(run_id) is True
    assert await backend.deliver_signal(run_id, "e", js({"ok": True})) == "ended"
    assert await backend.get_steps(run_id) == []
    published = await backend.publish("e", js({"ok": True}))
    assert run_id not in published.resumed

    # A running run: its holder loses the lease.
    await create(backend)
    running = await claim_one(backend)
    assert await backend.cancel_run(running.run.id) is True
    assert await backend.extend_leases("w1", [(running.run.id, running.lease_token)], 30) == set()
    assert (await transition(backend, running, Complete(js(1)))).ok is False
    stored = await backend.get_run(running.run.id)
    assert stored is not None
    assert stored.status == "cancelled"


async def test_cancel_cascades_to_live_children(backend: Backend) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    kids = [new_run("child", input=i, parent_id=parent.id, parent_step=f"c{i}") for i in range(3)]
    assert (await transition(backend, held, Park("child"), children=tuple(kids))).ok
    # One child already completed, one is running with its own child.
    done_kid = await claim_one(backend, workflows=CHILD)
    assert (await transition(backend, done_kid, Complete(js("early")))).ok
    running_kid = await claim_one(backend, workflows=CHILD)
    grandchild = new_run("child", input="g", parent_id=running_kid.run.id, parent_step="g")
    assert (await transition(backend, running_kid, children=(grandchild,))).ok

    assert await backend.cancel_run(parent.id) is True
    statuses = {}
    for run_id in [parent.id, grandchild.id, *(k.id for k in kids)]:
        stored = await backend.get_run(run_id)
        assert stored is not None
        statuses[run_id] = stored.status
    assert statuses[parent.id] == "cancelled"
    assert statuses[done_kid.run.id] == "completed"
    assert statuses[running_kid.run.id] == "cancelled"
    assert statuses[grandchild.id] == "cancelled"
    pending_kid = next(k.id for k in kids if k.id not in (done_kid.run.id, running_kid.run.id))
    assert statuses[pending_kid] == "cancelled"
    assert await claim(backend, workflows=CHILD) == []
    assert await claim(backend) == []
    # The parent was cancelled itself: no failed journal rows written into it.
    assert [(s.name, s.status) for s in await backend.get_steps(parent.id)] == [
        (done_kid.run.parent_step or "?", "completed")
    ]


async def test_cancelling_a_child_fails_the_parent_row_and_wakes_the_parent(
    backend: Backend,
) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    child = new_run("child", input=None, parent_id=parent.id, parent_step="kid")
    assert (await transition(backend, held, Park("child"), children=(child,))).ok
    assert not await _is_due_now(backend, parent.id)

    assert await backend.cancel_run(child.id) is True
    steps = await backend.get_steps(parent.id)
    assert len(steps) == 1
    row = steps[0]
    assert (row.name, row.kind, row.status) == ("kid", "child", "failed")
    assert row.error is not None
    assert row.error.get("type") == "WorkflowCancelled"
    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert stored.status == "waiting"
    assert await _is_due_now(backend, parent.id)
    woken = await claim_one(backend)
    assert woken.run.id == parent.id


async def test_cancel_releases_nothing_else(backend: Backend) -> None:
    keep = await create(backend, input="keep")
    gone = await create(backend, input="gone")
    assert await backend.cancel_run(gone.id)
    held = await claim_one(backend)
    assert held.run.id == keep.id
    assert (await transition(backend, held, Release())).ok


# --------------------------------------------------------------------------- races


async def test_signal_racing_a_park_is_never_lost(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    for i in range(15):
        run = await create(backend, f"race{i}")
        held = await claim_one(backend, workflows=((f"race{i}", 1),))
        park = transition(backend, held, Park("event"), waits=(WaitWrite("w", "go"),))
        signal = other.deliver_signal(run.id, "go", js({"i": i}))
        if i % 2:
            parked, outcome = await asyncio.gather(park, signal)
        else:
            outcome, parked = await asyncio.gather(signal, park)
        assert parked.ok
        assert outcome in ("resolved", "buffered")
        steps = await backend.get_steps(run.id)
        assert [(s.name, s.status, s.output) for s in steps] == [("w", "completed", {"i": i})]
        assert await _is_due_now(backend, run.id), f"lost wake-up ({outcome})"


async def test_two_signals_racing_for_one_wait_resolve_it_once(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    for i in range(10):
        held = await _waiting_run(backend, f"pair{i}", event="e")
        outcomes = await asyncio.gather(
            backend.deliver_signal(held.run.id, "e", js("a")),
            other.deliver_signal(held.run.id, "e", js("b")),
        )
        assert sorted(outcomes) == ["buffered", "resolved"]
        steps = await backend.get_steps(held.run.id)
        assert len(steps) == 1
        assert steps[0].output == ("a" if outcomes[0] == "resolved" else "b")


async def test_concurrent_publish_with_one_key_acts_once(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    await backend.register_workflows([WorkflowRecord("sub", 1)])
    await backend.subscribe_topic("evt", "sub")
    waiter = (await _waiting_run(backend, "w1", event="evt")).run.id
    instances = [backend, other]
    results = await asyncio.gather(
        *(instances[i % 2].publish("evt", js({"n": i}), idempotency_key="k") for i in range(10))
    )
    assert all(r == results[0] for r in results)
    assert results[0].resumed == (waiter,)
    assert len(results[0].started) == 1
    assert len(await backend.get_steps(waiter)) == 1
    started = await claim(backend, workflows=(("sub", 1),))
    assert [c.run.id for c in started] == list(results[0].started)


async def test_cancelling_a_child_of_an_ended_parent_leaves_the_parent_alone(
    backend: Backend,
) -> None:
    parent = await create(backend)
    held = await claim_one(backend)
    child = new_run("child", input=None, parent_id=parent.id, parent_step="kid")
    assert (await transition(backend, held, Complete(js("p")), children=(child,))).ok
    assert await backend.cancel_run(child.id) is True
    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert (stored.status, stored.output) == ("completed", "p")
    assert stored.wake_at is None
    assert await claim(backend) == []
    assert "cancelled" not in await event_types(backend, parent.id)


async def test_signal_skips_older_waits_it_does_not_match(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend)
    past = (await backend.now()) - timedelta(seconds=1)
    older = WaitWrite("a", "e", js({"x": 1}))
    assert (await transition(backend, held, Park("event", past), waits=(older,))).ok
    held = await claim_one(backend)
    newer = WaitWrite("b", "e", js({"x": 2}))
    assert (await transition(backend, held, Park("event"), waits=(newer,))).ok
    run_id = held.run.id
    assert await backend.deliver_signal(run_id, "e", js({"x": 2, "y": 0})) == "resolved"
    assert [(s.name, s.output) for s in await backend.get_steps(run_id)] == [
        ("b", {"x": 2, "y": 0})
    ]
    again = await claim_one(backend)
    assert [w.key for w in again.waits] == ["a"]
    # publish picks the matching wait the same way.
    assert (await transition(backend, again, Park("event"))).ok
    published = await backend.publish("e", js({"x": 1}))
    assert published.resumed == (run_id,)
    assert [s.name for s in await backend.get_steps(run_id)] == ["b", "a"]


async def test_one_buffered_signal_satisfies_only_one_new_wait(backend: Backend) -> None:
    run = await create(backend)
    assert await backend.deliver_signal(run.id, "e", js("s1")) == "buffered"
    held = await claim_one(backend)
    waits = (WaitWrite("a", "e"), WaitWrite("b", "e"))
    assert (await transition(backend, held, Park("event"), waits=waits)).ok
    steps = await backend.get_steps(run.id)
    assert [(s.kind, s.output) for s in steps] == [("wait", "s1")]
    again = await claim_one(backend)
    assert len(again.waits) == 1
    assert {again.waits[0].key, steps[0].name} == {"a", "b"}


async def test_two_buffered_signals_satisfy_two_new_waits(backend: Backend) -> None:
    run = await create(backend)
    for payload in ("s1", "s2"):
        assert await backend.deliver_signal(run.id, "e", js(payload)) == "buffered"
    held = await claim_one(backend)
    waits = (WaitWrite("a", "e"), WaitWrite("b", "e"))
    assert (await transition(backend, held, Park("event"), waits=waits)).ok
    steps = await backend.get_steps(run.id)
    assert sorted(s.name for s in steps) == ["a", "b"]
    assert sorted(s.output for s in steps) == ["s1", "s2"]
    again = await claim_one(backend)
    assert again.waits == ()


async def test_cancelling_a_child_of_a_running_parent_keeps_the_parent_lease(
    backend: Backend,
) -> None:
    parent = await create(backend)
    held = await claim_one(backend, lease=30)
    child = new_run("child", input=None, parent_id=parent.id, parent_step="kid")
    assert (await transition(backend, held, children=(child,))).ok
    assert await backend.cancel_run(child.id) is True
    steps = await backend.get_steps(parent.id)
    assert [(s.name, s.status) for s in steps] == [("kid", "failed")]
    stored = await backend.get_run(parent.id)
    assert stored is not None
    assert stored.status == "running"
    assert await claim(backend, worker="w-other") == []
    assert await backend.extend_leases("w1", [(parent.id, held.lease_token)], 30) == {parent.id}
    assert (await transition(backend, held, Complete(js("ok")))).ok


async def test_publish_starts_only_registered_workflows(backend: Backend) -> None:
    await backend.register_workflows([WorkflowRecord("real", 1)])
    assert await backend.subscribe_topic("evt", "ghost")
    assert await backend.subscribe_topic("evt", "real")
    published = await backend.publish("evt", js(1))
    assert len(published.started) == 1
    run = await backend.get_run(published.started[0])
    assert run is not None
    assert run.workflow == "real"
