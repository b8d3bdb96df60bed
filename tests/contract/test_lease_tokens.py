"""Contract: a lease token is a secret of its claim. It carries 64 random bits, so it
cannot be worked out from the claim's time, and no event shows it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from perdure.backends.base import Backend
from perdure.records import Claim, ClaimParams, Complete, Release, Transition

from .helpers import WF, claim, claim_one, create, js, new_run, transition

pytestmark = pytest.mark.timeout(120)

#: How far a token taken from the clock (milliseconds) could stray from the claim time.
_NEAR = 10**7


async def _ms(backend: Backend) -> int:
    return int((await backend.now()).timestamp() * 1000)


def _not_from_the_clock(token: int, ms: int) -> bool:
    return abs(token - ms) > _NEAR


def _claim_for(worker: str) -> ClaimParams:
    return ClaimParams(worker, WF, 1, 30)


async def test_tokens_are_random_not_the_claim_time(backend: Backend) -> None:
    for _ in range(50):
        await create(backend)
    claims: list[Claim] = []
    while len(claims) < 50:
        got = await claim(backend, limit=50)
        assert got, "the runs created above were not claimable"
        claims += got
    ms = await _ms(backend)
    tokens = [c.lease_token for c in claims]
    assert all(_not_from_the_clock(t, ms) for t in tokens), tokens
    assert len(set(tokens)) == 50
    # The high 16 bits vary as random bits do (a time in ms leaves them all 0).
    assert len({(t >> 48) & 0xFFFF for t in tokens}) > 40, tokens


async def test_two_claims_of_one_run_in_the_same_moment_differ_in_no_sequence(
    backend: Backend,
) -> None:
    run = await create(backend)
    first = await claim_one(backend, worker="w-a")
    assert (await transition(backend, first, Release())).ok  # claimable again at once
    second = await claim_one(backend, worker="w-b")
    assert second.run.id == run.id
    assert abs(second.lease_token - first.lease_token) > _NEAR
    ms = await _ms(backend)
    assert _not_from_the_clock(first.lease_token, ms)
    assert _not_from_the_clock(second.lease_token, ms)


async def test_no_event_shows_a_token(backend: Backend) -> None:
    await create(backend)
    held = await claim_one(backend, worker="w-a")
    leased = await backend.create_run(new_run(input=1), _claim_for("w-b"))
    (started,) = leased.claimed
    later = await backend.now() + timedelta(hours=1)
    absolute = await backend.create_run(new_run(input=2, deadline_at=later), _claim_for("w-c"))
    (started_late,) = absolute.claimed
    for owner, worker in ((held, "w-a"), (started, "w-b"), (started_late, "w-c")):
        events = await backend.get_events(owner.run.id)
        assert [(e.type, e.data) for e in events if e.type == "claimed"] == [
            ("claimed", {"worker": worker})
        ]
        shown = json.dumps([e.data for e in events])
        assert str(owner.lease_token) not in shown


async def test_guessing_from_the_last_five_seconds_completes_nothing(backend: Backend) -> None:
    """The attack the review ran: a token was the claim time in ms, so trying every
    millisecond of the last 5 s found it and completed the task with a forged result."""
    run = await create(backend)
    held = await claim_one(backend, worker="w-a")
    now = await _ms(backend)
    guesses = range(now - 5000, now + 50)
    for start in range(0, len(guesses), 500):
        forged = [
            Transition(run.id, token, outcome=Complete(js("forged")))
            for token in guesses[start : start + 500]
        ]
        assert not any(r.ok for r in await backend.apply(forged))
    stored = await backend.get_run(run.id)
    assert stored is not None and stored.status == "running" and stored.output is None
    assert (await transition(backend, held, Complete(js("real")))).ok
    done = await backend.get_run(run.id)
    assert done is not None and done.output == "real"
