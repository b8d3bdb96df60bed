"""Contract: notices (wake / done / cancel) via subscribe, across backend instances.

Notices may be lost or duplicated in failures, so these tests only ask that each
expected notice arrives within a deadline in normal operation. Each subscriber is
first proven live (a warm-up notice reached it) so a listener that connects in the
background is not mistaken for a lost notice.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from perdure.backends.base import Backend
from perdure.records import Complete, Fail, Park, WaitWrite, WorkflowRecord

from .helpers import (
    BackendFactory,
    claim_one,
    create,
    js,
    listen_live,
    new_run,
    transition,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def other(backend_factory: BackendFactory) -> Backend:
    """A second instance on the same database: the subscriber "process"."""
    return await backend_factory()


async def test_create_run_notifies_wake_to_another_instance(
    backend: Backend, other: Backend
) -> None:
    notices, unsubscribe = await listen_live(backend, other)
    run = await create(backend)
    await wait_until(lambda: notices.has("wake", run.id))
    assert notices.off_loop == []
    await unsubscribe()


async def test_subscriber_on_the_same_instance_is_notified(backend: Backend) -> None:
    notices, unsubscribe = await listen_live(backend, backend)
    run = await create(backend)
    await wait_until(lambda: notices.has("wake", run.id))
    assert notices.off_loop == []
    await unsubscribe()


async def test_complete_and_fail_notify_done(backend: Backend, other: Backend) -> None:
    notices, unsubscribe = await listen_live(backend, other)
    ok = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Complete(js(1)))).ok
    bad = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Fail({"type": "E", "message": "m"}))).ok
    await wait_until(lambda: notices.has("done", ok.id) and notices.has("done", bad.id))
    assert notices.off_loop == []
    await unsubscribe()


async def test_cancel_notifies_cancel_and_done(backend: Backend, other: Backend) -> None:
    notices, unsubscribe = await listen_live(backend, other)
    run = await create(backend)
    held = await claim_one(backend)
    assert held.run.id == run.id
    assert await backend.cancel_run(run.id) is True
    await wait_until(lambda: notices.has("cancel", run.id) and notices.has("done", run.id))
    await unsubscribe()


async def test_resolved_signal_and_due_park_notify_wake(backend: Backend, other: Backend) -> None:
    notices, unsubscribe = await listen_live(backend, other)
    # A waiting run resolved by a signal.
    waiting = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("w", "e"),))).ok
    notices.items.clear()
    assert await backend.deliver_signal(waiting.id, "e", js(1)) == "resolved"
    await wait_until(lambda: notices.has("wake", waiting.id))

    # A park that is due at once (a buffered signal satisfies its wait).
    buffered = await create(backend, "b")
    held = await claim_one(backend, workflows=(("b", 1),))
    assert await backend.deliver_signal(buffered.id, "e", js(2)) == "buffered"
    notices.items.clear()
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("w", "e"),))).ok
    await wait_until(lambda: notices.has("wake", buffered.id))

    # A park whose wake_at has already passed.
    late = await create(backend, "c")
    held = await claim_one(backend, workflows=(("c", 1),))
    notices.items.clear()
    past = (await backend.now()) - timedelta(seconds=1)
    assert (await transition(backend, held, Park("sleep", past))).ok
    await wait_until(lambda: notices.has("wake", late.id))
    await unsubscribe()


async def test_publish_notifies_wake(backend: Backend, other: Backend) -> None:
    await backend.register_workflows([WorkflowRecord("sub", 1)])
    await backend.subscribe_topic("evt", "sub")
    notices, unsubscribe = await listen_live(backend, other)
    waiting = await create(backend)
    held = await claim_one(backend)
    assert (await transition(backend, held, Park("event"), waits=(WaitWrite("w", "evt"),))).ok
    notices.items.clear()
    published = await backend.publish("evt", js({"x": 1}))
    assert published.resumed == (waiting.id,)
    [started] = published.started
    await wait_until(lambda: notices.has("wake", waiting.id) and notices.has("wake", started))
    await unsubscribe()


async def test_child_end_wakes_the_parent(backend: Backend, other: Backend) -> None:
    notices, unsubscribe = await listen_live(backend, other)
    parent = await create(backend)
    held = await claim_one(backend)
    child = new_run("child", parent_id=parent.id, parent_step="c")
    assert (await transition(backend, held, Park("child"), children=(child,))).ok
    # Inserting a child makes it claimable: wake.
    await wait_until(lambda: notices.has("wake", child.id))
    child_claim = await claim_one(backend, workflows=(("child", 1),))
    notices.items.clear()
    assert (await transition(backend, child_claim, Complete(js("r")))).ok
    await wait_until(lambda: notices.has("done", child.id) and notices.has("wake", parent.id))
    await unsubscribe()


async def test_unsubscribe_stops_delivery(backend: Backend, other: Backend) -> None:
    stopped, unsubscribe_stopped = await listen_live(backend, other)
    still, unsubscribe_still = await listen_live(backend, other)
    await unsubscribe_stopped()
    stopped.items.clear()

    first = await create(backend)
    await wait_until(lambda: still.has("wake", first.id))
    second = await create(backend)
    await wait_until(lambda: still.has("wake", second.id))
    assert stopped.items == []
    await unsubscribe_still()


async def test_cancel_cascade_notifies_every_cancelled_run(
    backend: Backend, other: Backend
) -> None:
    notices, unsubscribe = await listen_live(backend, other)
    parent = await create(backend)
    held = await claim_one(backend)
    child = new_run("child", parent_id=parent.id, parent_step="c")
    assert (await transition(backend, held, Park("child"), children=(child,))).ok
    assert (await claim_one(backend, workflows=(("child", 1),))).run.id == child.id
    assert await backend.cancel_run(parent.id) is True
    await wait_until(
        lambda: all(
            notices.has(kind, run_id)
            for kind in ("cancel", "done")
            for run_id in (parent.id, child.id)
        )
    )
    await unsubscribe()
