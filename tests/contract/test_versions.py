"""defer_unavailable: runs of versions no worker has wait with a backoff, never fail."""

from __future__ import annotations

from datetime import timedelta

from perdure.backends.base import Backend
from perdure.records import DeferParams, EventWrite, Release, Transition

from .helpers import claim, claim_one, close_to, create, event_types


async def test_runs_of_an_unserved_version_are_deferred_with_backoff(backend: Backend) -> None:
    v2 = await create(backend, workflow="wf", version=2)
    v1 = await create(backend, workflow="wf", version=1)
    other = await create(backend, workflow="other", version=7)
    params = DeferParams("w-old", (("wf", 1),), grace_seconds=0)

    assert await backend.defer_unavailable(params) == [v2.id]
    run = await backend.get_run(v2.id)
    assert run is not None and (run.status, run.wake_reason) == ("waiting", "version")
    now = await backend.now()
    assert close_to(run.wake_at, now + timedelta(seconds=5), timedelta(seconds=2))
    assert (await event_types(backend, v2.id)).count("version_unavailable") == 1
    events = [e for e in await backend.get_events(v2.id) if e.type == "version_unavailable"]
    assert events[0].data == {"worker": "w-old", "version": 2, "retry_in": 5}
    # Untouched: the served version, and names the worker does not serve at all.
    assert (await backend.get_run(v1.id)).status == "pending"  # type: ignore[union-attr]
    assert (await backend.get_run(other.id)).status == "pending"  # type: ignore[union-attr]
    # Not due any more: nothing to defer; a worker with the version can still claim it later.
    assert await backend.defer_unavailable(params) == []
    assert [c.run.id for c in await claim(backend, workflows=(("wf", 2),))] == []


async def test_grace_leaves_fresh_runs_to_capable_workers(backend: Backend) -> None:
    await create(backend, workflow="wf", version=2)
    assert await backend.defer_unavailable(DeferParams("w", (("wf", 1),), grace_seconds=3600)) == []


async def test_backoff_doubles_with_each_earlier_deferral(backend: Backend) -> None:
    run = await create(backend, workflow="wf", version=3)
    for _ in range(2):  # two earlier deferrals, recorded as a worker would, then released
        held = await claim_one(backend, workflows=(("wf", 3),))
        event = EventWrite("version_unavailable", {"worker": "w", "version": 3})
        [result] = await backend.apply(
            [Transition(run.id, held.lease_token, events=(event,), outcome=Release())]
        )
        assert result.ok
    assert await backend.defer_unavailable(DeferParams("w", (("wf", 1),), grace_seconds=0)) == [
        run.id
    ]
    events = [e for e in await backend.get_events(run.id) if e.type == "version_unavailable"]
    assert events[-1].data["retry_in"] == 20
