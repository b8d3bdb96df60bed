"""Contract: claim on complete (`Transition.claim`). A transition that completes a
DAG-flow task leases tasks of the same flow run that it made claimable to the
completing worker, in the same transaction and exactly as `claim_runs` would; the
flow run's wake notice goes out only if claimable tasks remain."""

from __future__ import annotations

from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.flows.definition import FlowShape, StepShape
from perdure.records import (
    Claim,
    ClaimParams,
    Complete,
    Retry,
    Transition,
    TransitionResult,
)

from .helpers import Notices, claim, claim_one, create, js, new_run, skip_clock, wait_until

pytestmark = pytest.mark.timeout(60)

SHAPE = FlowShape(
    "fan",
    steps=(
        StepShape("a"),
        StepShape("b", ("a",)),
        StepShape("c", ("a",)),
        StepShape("d", ("a",)),
        StepShape("e", ("b", "c", "d")),
    ),
)
PAIRS = tuple((f"fan:{s.name}", 1) for s in SHAPE.steps)


async def _first(backend: Backend) -> tuple[str, Claim]:
    await backend.register_flows([SHAPE])
    run = (await backend.start_flow(new_run("fan", version=None, input=7))).run
    (a,) = await claim(backend, workflows=PAIRS, limit=10)
    return run.id, a


async def _complete(
    backend: Backend,
    task: Claim,
    output: Any,
    *,
    limit: int = 10,
    pairs: tuple[tuple[str, int], ...] = PAIRS,
    worker: str = "w2",
) -> TransitionResult:
    (result,) = await backend.apply(
        [
            Transition(
                task.run.id,
                task.lease_token,
                outcome=Complete(js(output)),
                claim=ClaimParams(worker, pairs, limit, 30.0),
            )
        ]
    )
    return result


async def test_completing_a_task_hands_over_the_tasks_it_unlocks(backend: Backend) -> None:
    run_id, a = await _first(backend)
    result = await _complete(backend, a, "A", limit=2)
    assert result.ok
    handed = {c.run.parent_step or "": c for c in result.claimed}
    assert sorted(handed) == ["b", "c"]  # up to the limit, in claim order
    for task in handed.values():
        assert task.run.parent_id == run_id and task.run.status == "running"
        assert task.run.input == {"run": 7, "a": "A"}
        assert task.run.attempt == 1 and not task.recovered
        assert task.lease_token != 0 and task.claims_since_progress == 1
        events = [(e.type, e.data) for e in await backend.get_events(task.run.id)]
        assert ("claimed", {"worker": "w2"}) in events  # a token is never shown
    # the one not handed over is claimable by anyone; the handed ones are leased
    (d,) = await claim(backend, workflows=PAIRS, limit=10)
    assert d.run.parent_step == "d"
    # handed tasks are fenced and heartbeated like claimed ones
    b, c = handed["b"], handed["c"]
    held = [(b.run.id, b.lease_token), (c.run.id, c.lease_token)]
    assert await backend.extend_leases("w2", held, 30.0) == {b.run.id, c.run.id}
    stale = Transition(b.run.id, b.lease_token - 1, outcome=Complete(js("x")))
    assert not (await backend.apply([stale]))[0].ok
    assert (await _complete(backend, b, "B")).claimed == ()  # e waits for c and d
    assert (await _complete(backend, d, "D")).claimed == ()
    last = await _complete(backend, c, "C")
    ((_, e),) = [(t.run.parent_step, t) for t in last.claimed]
    assert e.run.input == {"run": 7, "b": "B", "c": "C", "d": "D"}
    assert (await _complete(backend, e, "E")).ok
    finished = await backend.get_run(run_id)
    assert finished is not None and finished.status == "completed"
    assert finished.output == {"e": "E"}


async def test_only_served_tasks_are_handed_over(backend: Backend) -> None:
    _, a = await _first(backend)
    result = await _complete(backend, a, "A", pairs=(("fan:c", 1), ("other", 1)))
    assert [t.run.parent_step for t in result.claimed] == ["c"]
    left = await claim(backend, workflows=PAIRS, limit=10)
    assert sorted(t.run.parent_step or "" for t in left) == ["b", "d"]


async def test_limit_zero_and_other_transitions_hand_over_nothing(backend: Backend) -> None:
    _, a = await _first(backend)
    assert (await _complete(backend, a, "A", limit=0)).claimed == ()
    tasks = await claim(backend, workflows=PAIRS, limit=10)
    assert len(tasks) == 3
    # a retry claims nothing (it unlocks nothing)
    b = tasks[0]
    (retried,) = await backend.apply(
        [
            Transition(
                b.run.id,
                b.lease_token,
                outcome=Retry(b.now, {"type": "E"}),
                claim=ClaimParams("w2", PAIRS, 10, 30.0),
            )
        ]
    )
    assert retried.ok and retried.claimed == ()
    # a workflow run (no task) ignores the claim: its due runs stay claimable
    await create(backend)
    await create(backend)
    held = await claim_one(backend)
    (done,) = await backend.apply(
        [
            Transition(
                held.run.id,
                held.lease_token,
                outcome=Complete(js(1)),
                claim=ClaimParams("w2", (("wf", 1),), 10, 30.0),
            )
        ]
    )
    assert done.ok and done.claimed == ()
    assert len(await claim(backend)) == 1


async def test_a_fenced_out_completion_hands_over_nothing(backend: Backend) -> None:
    _, a = await _first(backend)
    assert (await _complete(backend, a, "A", limit=0)).ok
    again = await _complete(backend, a, "A")  # the same token again: fenced
    assert not again.ok and again.claimed == ()
    assert len(await claim(backend, workflows=PAIRS, limit=10)) == 3


async def test_the_retry_of_a_completion_whose_answer_was_lost_hands_over_its_tasks(
    backend: Backend,
) -> None:
    """The same transition again after it committed (a retry after its answer was
    lost) is fenced out, and hands over what the commit leased, as the commit did;
    not to another worker, and not once their leases lapsed."""
    _, a = await _first(backend)
    first = await _complete(backend, a, "A", limit=2)
    again = await _complete(backend, a, "A", limit=2)  # the retry
    assert not again.ok
    assert sorted((c.run.id, c.lease_token) for c in again.claimed) == sorted(
        (c.run.id, c.lease_token) for c in first.claimed
    )
    assert len(again.claimed) == 2
    for task in again.claimed:
        assert task.run.status == "running" and not task.recovered and task.journal == ()
        assert task.run.input == {"run": 7, "a": "A"}
    assert (await _complete(backend, a, "A", worker="w3")).claimed == ()
    await skip_clock(backend, 31)  # their 30 s leases lapse
    assert (await _complete(backend, a, "A")).claimed == ()


async def test_the_wake_notice_goes_out_only_for_tasks_left(backend: Backend) -> None:
    notices = Notices()
    unsubscribe = await backend.listen(notices)
    try:
        await backend.register_flows([SHAPE])
        # warm-up: the listener is live once a notice reached it
        warm = await create(backend)
        await wait_until(lambda: notices.has("wake", warm.id), timeout=10, interval=0.05)
        one = (await backend.start_flow(new_run("fan", version=None, input=1))).run
        two = (await backend.start_flow(new_run("fan", version=None, input=2))).run
        await wait_until(lambda: notices.has("wake", two.id), timeout=10, interval=0.05)
        tasks = {c.run.parent_id: c for c in await claim(backend, workflows=PAIRS, limit=10)}
        notices.items.clear()
        # all three handed over: no wake for `one`; then a marker notice
        assert len((await _complete(backend, tasks[one.id], "A", limit=3)).claimed) == 3
        marker = await create(backend)
        await wait_until(lambda: notices.has("wake", marker.id), timeout=10, interval=0.05)
        assert not notices.has("wake", one.id)
        # one of three handed over: the wake goes out for the two left
        assert len((await _complete(backend, tasks[two.id], "A", limit=1)).claimed) == 1
        await wait_until(lambda: notices.has("wake", two.id), timeout=10, interval=0.05)
    finally:
        await unsubscribe()


async def test_only_tasks_the_completion_started_are_handed_over(backend: Backend) -> None:
    _, a = await _first(backend)
    (b,) = (await _complete(backend, a, "A", limit=1)).claimed
    # c and d were started by a's completion, not b's: b's hands over nothing
    assert (await _complete(backend, b, "B")).claimed == ()
    left = await claim(backend, workflows=PAIRS, limit=10)
    assert sorted(t.run.parent_step or "" for t in left) == ["c", "d"]
