"""Contract: create_run with ``claim`` (a start handed to a worker of the starting
process): the new run is leased to that worker in the start's own transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest

from perdure.backends.base import Backend
from perdure.flows.definition import FlowShape, StepShape
from perdure.records import Claim, ClaimParams, Complete

from .helpers import (
    WF,
    BackendFactory,
    claim,
    close_to,
    create,
    event_types,
    listen_live,
    new_run,
    skip_clock,
    transition,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

_TOL = timedelta(milliseconds=50)


def _for(worker: str = "w-local", lease: float = 30) -> ClaimParams:
    return ClaimParams(worker, WF, 1, lease)


async def test_a_start_leased_to_a_worker_is_claimed_in_its_own_transaction(
    backend: Backend,
) -> None:
    before = await backend.now()
    result = await backend.create_run(new_run(input={"x": 1}), _for(lease=30))
    after = await backend.now()
    assert result.created
    (held,) = result.claimed
    assert held.run.id == result.run.id
    assert held.run.status == "running" and result.run.status == "running"
    assert held.run.input == {"x": 1}
    assert held.lease_token != 0
    assert (held.journal, held.waits) == ((), ())
    assert (held.claims_since_progress, held.step_attempts, held.recovered) == (1, 0, False)
    assert before <= held.now <= after
    assert held.run.started_at is not None
    assert await event_types(backend, held.run.id) == ["created", "claimed"]
    # Nobody else can claim it while the lease lives; its lease runs out like a claim's.
    assert await claim(backend, worker="w-other") == []
    stored = await backend.get_run(held.run.id)
    assert stored is not None and stored.status == "running"
    assert close_to(stored.started_at, held.run.started_at)
    # The worker's writes are fenced by the token it got, as after a claim.
    done = await transition(backend, held, outcome=Complete(output_json='"ok"'))
    assert done.ok
    ended = await backend.get_run(held.run.id)
    assert ended is not None and ended.status == "completed" and ended.output == "ok"


async def test_an_existing_run_is_returned_unleased(backend: Backend) -> None:
    first = await create(backend, idempotency_key="k-1")
    again = await backend.create_run(new_run(idempotency_key="k-1"), _for())
    assert not again.created
    assert again.claimed == ()
    assert again.run.id == first.id and again.run.status == "pending"
    # Still claimable by any worker.
    (held,) = await claim(backend, worker="w-other")
    assert held.run.id == first.id


async def test_a_leased_run_expires_and_is_recovered_like_a_claimed_one(
    backend: Backend,
) -> None:
    result = await backend.create_run(new_run(), _for(lease=0.2))
    (leased,) = result.claimed

    async def recovered() -> list[Claim]:
        return list(await claim(backend, worker="w-other"))

    (again,) = await wait_until(recovered, timeout=10)
    assert again.run.id == result.run.id
    assert again.recovered
    assert again.lease_token != leased.lease_token


async def test_a_leased_start_sends_no_wake_notice(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    notices, unsubscribe = await listen_live(backend, other)
    try:
        leased = await backend.create_run(new_run(), _for())
        marker = await create(backend)  # committed after: its notice comes after
        await wait_until(lambda: notices.has("wake", marker.id))
        assert not notices.has("wake", leased.run.id)
    finally:
        await unsubscribe()


# --------------------------------------------------------------------------- flows

FAN = FlowShape(
    "fanout",
    steps=(StepShape("a"), StepShape("b"), StepShape("c"), StepShape("d", ("a", "b", "c"))),
)
FAN_PAIRS = tuple((f"fanout:{s.name}", 1) for s in FAN.steps)


async def test_a_flow_start_leases_its_first_tasks_up_to_the_limit(backend: Backend) -> None:
    await backend.register_flows([FAN])
    params = ClaimParams("w-local", FAN_PAIRS, 2, 30.0)
    started = await backend.start_flow(new_run("fanout", version=None, input=3), params)
    assert started.created and started.run.status == "running"
    assert len(started.claimed) == 2  # roots a, b, c: two slots
    for task in started.claimed:
        assert task.run.parent_id == started.run.id and task.run.status == "running"
        assert task.run.input == {"run": 3}
        assert task.claims_since_progress == 1 and not task.recovered
        assert await event_types(backend, task.run.id) == ["created", "claimed"]
    # The third root is claimable by anyone; the leased ones are not.
    (rest,) = await claim(backend, worker="w-other", workflows=FAN_PAIRS)
    assert rest.run.parent_step not in {t.run.parent_step for t in started.claimed}


async def test_a_flow_start_leases_only_served_steps_and_not_an_existing_run(
    backend: Backend,
) -> None:
    await backend.register_flows([FAN])
    only_b = ClaimParams("w-local", (("fanout:b", 1),), 5, 30.0)
    first = await backend.start_flow(new_run("fanout", version=None, idempotency_key="k"), only_b)
    assert [t.run.parent_step for t in first.claimed] == ["b"]
    again = await backend.start_flow(new_run("fanout", version=None, idempotency_key="k"), only_b)
    assert not again.created and again.claimed == ()


async def test_a_flow_start_sends_its_wake_only_for_tasks_left(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    await backend.register_flows([FAN])
    other = await backend_factory()
    notices, unsubscribe = await listen_live(backend, other)
    try:
        every = ClaimParams("w-local", FAN_PAIRS, 3, 30.0)
        quiet = await backend.start_flow(new_run("fanout", version=None), every)
        assert len(quiet.claimed) == 3
        some = ClaimParams("w-local", FAN_PAIRS, 1, 30.0)
        loud = await backend.start_flow(new_run("fanout", version=None), some)
        await wait_until(lambda: notices.has("wake", loud.run.id))
        assert not notices.has("wake", quiet.run.id)
    finally:
        await unsubscribe()


async def test_a_start_under_flow_control_is_never_leased(backend: Backend) -> None:
    keyed = await backend.create_run(new_run(concurrency_key="tenant-1"), _for())
    assert keyed.created and keyed.claimed == () and keyed.run.status == "pending"
    debounced = await backend.create_run(new_run(debounce_key="d", debounce=60.0), _for())
    assert debounced.created and debounced.claimed == ()
    assert debounced.run.status == "pending"


# ------------------------------------------------ a start whose answer was lost


async def test_what_a_start_leased_is_handed_over_again_until_it_is_touched(
    backend: Backend,
) -> None:
    """`handed_at_start`: after a start whose answer was lost, the worker gets what it
    leased, with the same token, as long as nobody touched it since."""
    started = await backend.create_run(new_run(), _for())
    (leased,) = started.claimed
    (again,) = await backend.handed_at_start(leased.run.id, "w-local")
    assert (again.run.id, again.lease_token, again.recovered) == (
        leased.run.id,
        leased.lease_token,
        False,
    )
    assert (again.journal, again.waits, again.claims_since_progress) == ((), (), 1)
    assert await backend.handed_at_start(leased.run.id, "w-other") == ()
    plain = await create(backend)  # not leased by its start
    assert await backend.handed_at_start(plain.id, "w-local") == ()
    assert await backend.handed_at_start("no-such-run", "w-local") == ()
    await skip_clock(backend, 1)
    assert (await transition(backend, leased, step_attempts=1)).ok  # the worker wrote
    assert await backend.handed_at_start(leased.run.id, "w-local") == ()


async def test_a_flow_starts_leased_tasks_are_handed_over_again_while_untouched(
    backend: Backend,
) -> None:
    await backend.register_flows([FAN])
    params = ClaimParams("w-local", FAN_PAIRS, 2, 30.0)
    started = await backend.start_flow(new_run("fanout", version=None), params)
    first, second = started.claimed
    again = await backend.handed_at_start(started.run.id, "w-local")
    assert [(c.run.id, c.lease_token) for c in again] == [
        (c.run.id, c.lease_token) for c in started.claimed
    ]
    assert all(c.run.parent_id == started.run.id and not c.recovered for c in again)
    assert await backend.handed_at_start(first.run.id, "w-local") == ()  # a task's own id
    await skip_clock(backend, 1)
    assert (await transition(backend, first, outcome=Complete(output_json="1"))).ok
    (left,) = await backend.handed_at_start(started.run.id, "w-local")
    assert left.run.id == second.run.id
    await skip_clock(backend, 30)  # its lease lapsed: claimable by anyone, not handed
    assert await backend.handed_at_start(started.run.id, "w-local") == ()
