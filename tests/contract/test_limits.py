"""Contract: the limited claim (concurrency, key concurrency, FIFO keys, rate limits,
fairness across lanes) and debounced starts, on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.records import Claim, ClaimParams, Complete, Park, WorkflowLimits

from .helpers import BackendFactory, create, new_run, transition

pytestmark = pytest.mark.timeout(60)

WF = (("wf", 1),)


async def claim_limited(
    backend: Backend, limits: WorkflowLimits, limit: int = 10, worker: str = "w"
) -> list[Claim]:
    return await backend.claim_runs(ClaimParams(worker, WF, limit, 30.0, (limits,)))


async def keyed(backend: Backend, lane: str = "", **kw: Any) -> str:
    run = await create(backend, concurrency_key=lane, **kw)
    return run.id


async def finish(backend: Backend, held: Claim) -> None:
    await transition(backend, held, outcome=Complete("null"))


async def test_workflow_concurrency_counts_running_runs(backend: Backend) -> None:
    ids = [await keyed(backend) for _ in range(5)]
    limits = WorkflowLimits("wf", concurrency=2)
    first = await claim_limited(backend, limits)
    assert [c.run.id for c in first] == ids[:2]
    assert await claim_limited(backend, limits) == []
    await finish(backend, first[0])
    again = await claim_limited(backend, limits)
    assert [c.run.id for c in again] == ids[2:3]


async def test_a_parked_run_gives_its_slot_back(backend: Backend) -> None:
    ids = [await keyed(backend) for _ in range(2)]
    limits = WorkflowLimits("wf", concurrency=1)
    (held,) = await claim_limited(backend, limits)
    assert await claim_limited(backend, limits) == []
    await transition(backend, held, outcome=Park(wake_at=None, reason="event"))
    (other,) = await claim_limited(backend, limits)
    assert other.run.id == ids[1]


async def test_key_concurrency_lets_other_keys_proceed(backend: Backend) -> None:
    a = [await keyed(backend, "a") for _ in range(4)]
    b = [await keyed(backend, "b") for _ in range(2)]
    limits = WorkflowLimits("wf", key_concurrency=1)
    got = {c.run.id for c in await claim_limited(backend, limits)}
    assert got == {a[0], b[0]}
    assert await claim_limited(backend, limits) == []


async def test_equal_priorities_go_round_robin_across_keys(backend: Backend) -> None:
    backlog = [await keyed(backend, "big") for _ in range(40)]
    small = await keyed(backend, "small")
    limits = WorkflowLimits("wf", key_concurrency=1000)
    claims = await claim_limited(backend, limits, limit=3)
    ids = [c.run.id for c in claims]
    assert small in ids  # not behind the 40 of "big"
    assert set(ids) - {small} <= set(backlog[:2])


async def test_a_lower_priority_number_still_comes_first(backend: Backend) -> None:
    await keyed(backend, "a")
    urgent = await keyed(backend, "b", priority=1)
    (first,) = await claim_limited(backend, WorkflowLimits("wf", key_concurrency=5), limit=1)
    assert first.run.id == urgent


async def test_fifo_runs_one_at_a_time_per_key_in_start_order(backend: Backend) -> None:
    x = [(await create(backend, concurrency_key="x", fifo_key="x")).id for _ in range(3)]
    y = [(await create(backend, concurrency_key="y", fifo_key="y")).id for _ in range(2)]
    limits = WorkflowLimits("wf", fifo=True)
    order: list[str] = []
    while len(order) < 5:
        claims = await claim_limited(backend, limits)
        assert claims
        ids = [c.run.id for c in claims]
        assert len(set(ids) & set(x)) <= 1 and len(set(ids) & set(y)) <= 1
        order += ids
        for held in claims:
            await finish(backend, held)
    assert [i for i in order if i in x] == x
    assert [i for i in order if i in y] == y


async def test_a_parked_fifo_run_keeps_its_key(backend: Backend) -> None:
    first = await create(backend, concurrency_key="k", fifo_key="k")
    await create(backend, concurrency_key="k", fifo_key="k")
    limits = WorkflowLimits("wf", fifo=True)
    (held,) = await claim_limited(backend, limits)
    assert held.run.id == first.id
    await transition(backend, held, outcome=Park(wake_at=None, reason="event"))
    assert await claim_limited(backend, limits) == []


async def test_rate_limit_counts_starts_of_the_last_period(backend: Backend) -> None:
    for _ in range(5):
        await create(backend, concurrency_key="", rate_key="")
    limits = WorkflowLimits("wf", rate_limit=2, rate_period=3600.0)
    claims = await claim_limited(backend, limits)
    assert len(claims) == 2
    for held in claims:
        await finish(backend, held)
    # Finished runs still count: their starts are within the hour.
    assert await claim_limited(backend, limits) == []


async def test_rate_limit_per_key(backend: Backend) -> None:
    for key in ("a", "a", "a", "b", "b"):
        await create(backend, input=key, concurrency_key=key, rate_key=key)
    limits = WorkflowLimits("wf", rate_limit=1, rate_period=3600.0)
    claims = await claim_limited(backend, limits)
    assert sorted(c.run.input for c in claims) == ["a", "b"]
    assert await claim_limited(backend, limits) == []


async def test_a_run_whose_lease_expired_keeps_its_slot(backend: Backend) -> None:
    await keyed(backend)
    await keyed(backend)
    limits = WorkflowLimits("wf", concurrency=1)
    (held,) = await backend.claim_runs(ClaimParams("w", WF, 10, 0.2, (limits,)))

    async def reclaimed() -> list[Claim]:
        while True:
            got = await claim_limited(backend, limits)
            if got:
                return got
            await asyncio.sleep(0.05)

    got = await asyncio.wait_for(reclaimed(), 10)
    assert [c.run.id for c in got] == [held.run.id]
    assert got[0].recovered


async def test_runs_without_a_lane_are_claimed_as_usual(backend: Backend) -> None:
    # A run of a limited workflow started without keys (in SQL) is not limited; the
    # limited claim takes it on one of its next few claims.
    plain = await create(backend)
    limits = WorkflowLimits("wf", concurrency=1)
    got: list[str] = []
    for _ in range(16):
        got += [c.run.id for c in await claim_limited(backend, limits)]
        if got:
            break
    assert got == [plain.id]


async def test_racing_claimers_never_overshoot(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    for i in range(30):
        await keyed(backend, f"k{i % 3}", input={"k": f"k{i % 3}"})
    limits = WorkflowLimits("wf", concurrency=4, key_concurrency=1)
    claimers = [backend, *[await backend_factory() for _ in range(3)]]
    held: list[Claim] = []
    for _ in range(3):
        rounds = await asyncio.gather(
            *(claim_limited(b, limits, worker=f"w{i}") for i, b in enumerate(claimers))
        )
        held += [c for r in rounds for c in r]
        keys = [c.run.input["k"] for c in held]
        assert len(keys) == len(set(keys))  # key_concurrency=1
        assert len(held) <= 4
    assert len(held) == 3  # one per key: the keys bind before the workflow's 4


async def test_debounced_starts_keep_one_pending_run_with_the_last_input(
    backend: Backend,
) -> None:
    first = await backend.create_run(
        new_run(input={"n": 1}, debounce_key="doc", debounce=60.0, delay=60.0)
    )
    assert first.created
    second = await backend.create_run(
        new_run(input={"n": 2}, debounce_key="doc", debounce=60.0, delay=60.0)
    )
    assert not second.created
    assert second.run.id == first.run.id
    run = await backend.get_run(first.run.id)
    assert run is not None and run.input == {"n": 2}
    assert run.wake_at is not None and first.run.wake_at is not None
    assert run.wake_at >= first.run.wake_at
    assert "debounced" in [e.type for e in await backend.get_events(first.run.id)]


async def test_a_claimed_debounced_run_is_not_replaced(backend: Backend) -> None:
    first = await backend.create_run(new_run(input=1, debounce_key="d", debounce=0.01))

    async def claimed() -> list[Claim]:
        while True:
            got = await backend.claim_runs(ClaimParams("w", WF, 1, 30.0))
            if got:
                return got
            await asyncio.sleep(0.02)

    await asyncio.wait_for(claimed(), 10)
    again = await backend.create_run(new_run(input=2, debounce_key="d", debounce=0.01))
    assert again.created and again.run.id != first.run.id


async def test_with_more_keys_than_a_claim_takes_every_key_gets_its_turn(
    backend: Backend,
) -> None:
    for _ in range(2):
        for key in "abcdef":
            await keyed(backend, key, input=key)
    limits = WorkflowLimits("wf", key_concurrency=10)
    served: list[str] = []
    for _ in range(3):
        claims = await claim_limited(backend, limits, limit=2)
        served += [c.run.input for c in claims]
        for held in claims:
            await finish(backend, held)
    assert sorted(served) == list("abcdef")  # each key once before any key twice


async def test_a_keyed_start_is_idempotent_like_any_start(backend: Backend) -> None:
    first = await backend.create_run(
        new_run(input=1, idempotency_key="k", concurrency_key="t", fifo_key="t")
    )
    again = await backend.create_run(
        new_run(input=2, idempotency_key="k", concurrency_key="t", fifo_key="t")
    )
    assert first.created and not again.created
    assert again.run.id == first.run.id and again.input_differs
    (held,) = await claim_limited(backend, WorkflowLimits("wf", fifo=True, key_concurrency=1))
    assert held.run.id == first.run.id


async def test_a_fork_keeps_its_sources_keys(backend: Backend) -> None:
    source = await create(backend, concurrency_key="t")
    (held,) = await claim_limited(backend, WorkflowLimits("wf", key_concurrency=1))
    assert held.run.id == source.id
    fork = await backend.fork_run(source.id, "fork-1", None, None, None, "test")
    # The source holds key "t": the fork, in the same lane, waits for it.
    assert await claim_limited(backend, WorkflowLimits("wf", key_concurrency=1)) == []
    await finish(backend, held)
    (again,) = await claim_limited(backend, WorkflowLimits("wf", key_concurrency=1))
    assert again.run.id == fork.id


async def test_racing_claimers_never_overshoot_a_workflow_concurrency(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    # The workflow's concurrency alone (one lane, no walk on PostgreSQL).
    for _ in range(12):
        await keyed(backend)
    limits = WorkflowLimits("wf", concurrency=5)
    claimers = [backend, *[await backend_factory() for _ in range(3)]]
    rounds = await asyncio.gather(
        *(claim_limited(b, limits, limit=3, worker=f"w{i}") for i, b in enumerate(claimers))
    )
    held = [c for r in rounds for c in r]
    assert len(held) == 5
    assert len({c.run.id for c in held}) == 5
    await finish(backend, held[0])
    (more,) = await claim_limited(backend, limits)
    assert more.run.id not in {c.run.id for c in held}


async def test_runs_keyed_by_an_earlier_definition_count_under_its_concurrency(
    backend: Backend,
) -> None:
    # Runs started while the workflow had a concurrency key, claimed after it kept only
    # its concurrency: still claimed, and still counted.
    old = [await keyed(backend, f"t{i}") for i in range(3)]
    new = await keyed(backend)
    limits = WorkflowLimits("wf", concurrency=2)
    first = await claim_limited(backend, limits)
    assert len(first) == 2
    assert await claim_limited(backend, limits) == []
    for held in first:
        await finish(backend, held)
    rest = [c.run.id for c in await claim_limited(backend, limits)]
    rest += [c.run.id for c in await claim_limited(backend, limits)]
    assert len(rest) == 2
    assert {c.run.id for c in first} | set(rest) == {*old, new}


async def test_a_worker_without_the_limits_still_claims_runs_with_a_lane(
    backend: Backend,
) -> None:
    # Runs started under limits since removed (or that this worker's code lacks): the
    # plain claim takes them too, on one of its next few claims.
    lane = await keyed(backend, "t1")
    got: list[str] = []
    for _ in range(16):
        got += [c.run.id for c in await backend.claim_runs(ClaimParams("w", WF, 10, 30.0))]
        if got:
            break
    assert got == [lane]
