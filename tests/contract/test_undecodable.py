"""park_undecodable: a run whose sealed values its worker cannot open waits with a
backoff for a worker that can; it is never failed, and nothing else of it changes."""

from __future__ import annotations

from datetime import timedelta

from perdure.backends.base import Backend

from .helpers import (
    claim,
    claim_one,
    close_to,
    completed,
    create,
    park_waiting,
    skip_clock,
    transition,
)


async def test_a_held_run_is_parked_with_backoff_and_an_audit_event(backend: Backend) -> None:
    run = await create(backend, input={"~codec": "sealed"})
    held = await claim_one(backend)
    assert (await transition(backend, held, steps=(completed("a", 1),))).ok
    wake_at = await backend.park_undecodable(run.id, held.lease_token, "w-plain", "no codec")

    parked = await backend.get_run(run.id)
    assert parked is not None
    assert (parked.status, parked.wake_reason, parked.error) == ("waiting", "undecodable", None)
    now = await backend.now()
    assert wake_at is not None and close_to(parked.wake_at, wake_at)
    assert close_to(wake_at, now + timedelta(seconds=5), timedelta(seconds=2))
    [event] = [e for e in await backend.get_events(run.id) if e.type == "undecodable"]
    assert event.data == {"worker": "w-plain", "reason": "no codec", "retry_in": 5}
    # Its journal and input are untouched, and it is not due before its backoff.
    assert [s.name for s in await backend.get_steps(run.id)] == ["a"]
    assert parked.input == {"~codec": "sealed"}
    assert await claim(backend) == []

    await skip_clock(backend, 6)
    again = await claim_one(backend)
    assert again.run.id == run.id and [s.name for s in again.journal] == ["a"]
    # Parking is no crash: claims that only parked it do not count towards PoisonRun.
    assert again.claims_since_progress == 1


async def test_the_backoff_doubles_up_to_five_minutes(backend: Backend) -> None:
    run = await create(backend)
    delays = []
    for _ in range(8):
        held = await claim_one(backend)
        assert await backend.park_undecodable(run.id, held.lease_token, "w", "cannot decode: x")
        events = [e for e in await backend.get_events(run.id) if e.type == "undecodable"]
        delays.append(events[-1].data["retry_in"])
        await skip_clock(backend, 301)
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300]


async def test_only_the_lease_holder_parks(backend: Backend) -> None:
    run = await create(backend)
    held = await claim_one(backend, lease=1)
    await skip_clock(backend, 2)
    taken = await claim_one(backend, worker="w2")
    assert await backend.park_undecodable(run.id, held.lease_token, "w1", "no codec") is None
    after = await backend.get_run(run.id)
    assert after is not None and (after.status, after.wake_reason) == ("running", None)
    assert "undecodable" not in [e.type for e in await backend.get_events(run.id)]
    # A waiting run (no lease at all) is not parked either.
    await park_waiting(backend, taken)
    assert await backend.park_undecodable(run.id, taken.lease_token, "w2", "no codec") is None
    waiting = await backend.get_run(run.id)
    assert waiting is not None and waiting.wake_reason == "event"
