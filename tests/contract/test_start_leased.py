"""Contract: create_run with ``claim`` (a start handed to a worker of the starting
process): the new run is leased to that worker in the start's own transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest

from perdure.backends.base import Backend
from perdure.records import Claim, ClaimParams, Complete

from .helpers import (
    WF,
    BackendFactory,
    claim,
    close_to,
    create,
    event_types,
    new_run,
    transition,
    wait_until,
)
from .test_notices import _listen

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
    held = result.claim
    assert held is not None
    assert held.run.id == result.run.id
    assert held.run.status == "running" and result.run.status == "running"
    assert held.run.input == {"x": 1}
    assert held.lease_token > 0
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
    assert again.claim is None
    assert again.run.id == first.id and again.run.status == "pending"
    # Still claimable by any worker.
    (held,) = await claim(backend, worker="w-other")
    assert held.run.id == first.id


async def test_a_leased_run_expires_and_is_recovered_like_a_claimed_one(
    backend: Backend,
) -> None:
    result = await backend.create_run(new_run(), _for(lease=0.2))
    assert result.claim is not None

    async def recovered() -> list[Claim]:
        return list(await claim(backend, worker="w-other"))

    (again,) = await wait_until(recovered, timeout=10)
    assert again.run.id == result.run.id
    assert again.recovered
    assert again.lease_token > result.claim.lease_token


async def test_a_leased_start_sends_no_wake_notice(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    notices, unsubscribe = await _listen(backend, other)
    try:
        leased = await backend.create_run(new_run(), _for())
        marker = await create(backend)  # committed after: its notice comes after
        await wait_until(lambda: notices.has("wake", marker.id))
        assert not notices.has("wake", leased.run.id)
    finally:
        await unsubscribe()
