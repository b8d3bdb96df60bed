"""Contract: lifecycle, registry, create_run (incl. idempotency), reads and listings."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.errors import ValidationError
from perdure.ids import new_run_id
from perdure.records import (
    RUN_STATUSES,
    Complete,
    Fail,
    ListRunsParams,
    Park,
    Run,
    WorkflowRecord,
)

from .helpers import (
    BackendFactory,
    DatabaseLike,
    claim,
    claim_one,
    close_to,
    create,
    event_types,
    js,
    new_run,
    transition,
)

pytestmark = pytest.mark.timeout(60)


async def _all_runs(backend: Backend, **filters: Any) -> list[Run]:
    items: list[Run] = []
    cursor: str | None = None
    while True:
        page = await backend.list_runs(ListRunsParams(limit=1000, cursor=cursor, **filters))
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return items


# --------------------------------------------------------------------------- lifecycle


async def test_migrate_is_repeatable_and_reports_the_version(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    version = await backend.migrate()
    assert isinstance(version, int)
    assert version >= 1
    assert await backend.migrate() == version
    other = await backend_factory()
    assert await other.migrate() == version


async def test_concurrent_migrate_on_an_empty_database(database: DatabaseLike) -> None:
    instances = [database.make_backend() for _ in range(6)]
    try:
        for instance in instances:
            await instance.open()
        versions = await asyncio.gather(*(instance.migrate() for instance in instances))
        assert len(set(versions)) == 1
        assert versions[0] >= 1
        run = await create(instances[0])
        stored = await instances[-1].get_run(run.id)
        assert stored is not None
    finally:
        for instance in instances:
            await instance.close()


async def test_now_is_timezone_aware_utc(backend: Backend) -> None:
    now = await backend.now()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)


async def test_close_is_idempotent(backend: Backend, backend_factory: BackendFactory) -> None:
    other = await backend_factory()
    await other.close()
    await other.close()
    # The first instance is unaffected by closing the second.
    await create(backend)


# --------------------------------------------------------------------------- registry


async def test_register_workflows_upserts_and_get_workflow_picks_versions(
    backend: Backend,
) -> None:
    assert await backend.get_workflow("wf") is None
    await backend.register_workflows(
        [
            WorkflowRecord("wf", 1, {"retention_days": 3}),
            WorkflowRecord("wf", 3, {"priority": 7}),
            WorkflowRecord("wf", 2),
            WorkflowRecord("other", 1),
        ]
    )
    assert await backend.get_workflow("wf") == WorkflowRecord("wf", 3, {"priority": 7})
    assert await backend.get_workflow("wf", 1) == WorkflowRecord("wf", 1, {"retention_days": 3})
    assert await backend.get_workflow("wf", 2) == WorkflowRecord("wf", 2, {})
    assert await backend.get_workflow("wf", 4) is None
    assert await backend.get_workflow("nope") is None

    # Upsert: registering again replaces the options, adds no second row.
    await backend.register_workflows([WorkflowRecord("wf", 1, {"retention_days": 9})])
    assert await backend.get_workflow("wf", 1) == WorkflowRecord("wf", 1, {"retention_days": 9})
    assert await backend.get_workflow("wf") == WorkflowRecord("wf", 3, {"priority": 7})


# --------------------------------------------------------------------------- create_run


async def test_create_run_inserts_a_pending_run_with_a_created_event(backend: Backend) -> None:
    before = await backend.now()
    new = new_run(input={"n": 1, "tags": ["a", "b"]})
    result = await backend.create_run(new)
    after = await backend.now()

    assert result.created is True
    run = result.run
    assert run.id == new.id
    assert (run.workflow, run.version, run.status) == ("wf", 1, "pending")
    assert run.input == {"n": 1, "tags": ["a", "b"]}
    assert run.output is None
    assert run.error is None
    assert run.attempt == 1
    assert run.priority == 100
    assert run.parent_id is None
    assert run.parent_step is None
    assert run.idempotency_key is None
    assert run.retention_days == 30
    assert run.started_at is None
    assert run.completed_at is None
    assert run.deadline_at is None
    assert run.wake_reason is None
    assert run.done is False
    assert run.created_at.tzinfo is not None
    assert before - timedelta(milliseconds=1) <= run.created_at <= after + timedelta(milliseconds=1)
    # Due at once: a pending run is claimable from its creation.
    assert run.wake_at is not None
    assert run.wake_at <= after + timedelta(milliseconds=1)

    stored = await backend.get_run(new.id)
    assert stored is not None
    assert stored.id == run.id
    assert stored.status == "pending"
    assert stored.input == run.input
    assert close_to(stored.created_at, run.created_at)
    assert await event_types(backend, new.id) == ["created"]
    assert await backend.get_steps(new.id) == []


async def test_create_run_stores_priority_key_retention_and_deadline(backend: Backend) -> None:
    now = await backend.now()
    deadline = now + timedelta(hours=2)
    run = await create(
        backend,
        priority=5,
        idempotency_key="k-1",
        retention_days=3,
        deadline_at=deadline,
    )
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.priority == 5
    assert stored.idempotency_key == "k-1"
    assert stored.retention_days == 3
    assert close_to(stored.deadline_at, deadline)


async def test_create_run_deadline_in_is_measured_from_the_database_clock(
    backend: Backend,
) -> None:
    before = await backend.now()
    run = await create(backend, deadline_in=600)
    after = await backend.now()
    assert run.deadline_at is not None
    slack = timedelta(milliseconds=5)
    assert before + timedelta(seconds=600) - slack <= run.deadline_at
    assert run.deadline_at <= after + timedelta(seconds=600) + slack


async def test_create_run_with_delay_sets_wake_at(backend: Backend) -> None:
    before = await backend.now()
    run = await create(backend, delay=120)
    after = await backend.now()
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert stored.status == "pending"
    assert stored.wake_at is not None
    slack = timedelta(milliseconds=5)
    assert before + timedelta(seconds=120) - slack <= stored.wake_at
    assert stored.wake_at <= after + timedelta(seconds=120) + slack


async def test_create_run_with_run_at_sets_wake_at(backend: Backend) -> None:
    at = (await backend.now()) + timedelta(minutes=10)
    run = await create(backend, run_at=at)
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert close_to(stored.wake_at, at)
    assert close_to(run.wake_at, at)


async def test_json_values_round_trip(backend: Backend) -> None:
    values: list[Any] = [
        None,
        0,
        -17,
        2**53 + 1,
        1.5,
        "plain",
        "emoji 🎉 and RTL שלום and 中文",
        'quotes " and \\ backslash\nnewline',
        True,
        False,
        [],
        {},
        [1, "two", None, {"three": [3]}],
        {"nested": {"deeper": {"deepest": [1, 2, {"x": None}]}}, "ünï": "ç"},
    ]
    for value in values:
        run = await create(backend, input=value)
        stored = await backend.get_run(run.id)
        assert stored is not None
        assert stored.input == value, f"input {value!r} came back as {stored.input!r}"
        assert type(stored.input) is type(value), f"type of {value!r} changed"


async def test_reads_of_an_unknown_run(backend: Backend) -> None:
    unknown = new_run_id()
    assert await backend.get_run(unknown) is None
    assert await backend.get_steps(unknown) == []


# --------------------------------------------------------------------------- idempotency


async def test_same_key_same_input_returns_the_existing_run(backend: Backend) -> None:
    first = await backend.create_run(new_run(input={"a": 1, "b": [1, 2]}, idempotency_key="k"))
    # Same JSON value, different text (key order, whitespace): still the same input.
    again = replace(new_run(idempotency_key="k"), input_json='{ "b": [1, 2], "a": 1 }')
    second = await backend.create_run(again)
    assert first.created is True
    assert second.created is False
    assert second.run.id == first.run.id
    assert second.run.input == {"a": 1, "b": [1, 2]}
    assert await backend.get_run(again.id) is None
    assert [r.id for r in await _all_runs(backend)] == [first.run.id]
    assert await event_types(backend, first.run.id) == ["created"]


async def test_idempotency_keys_are_unique_per_workflow(backend: Backend) -> None:
    a = await backend.create_run(new_run("wf", input=1, idempotency_key="k"))
    b = await backend.create_run(new_run("other", input=2, idempotency_key="k"))
    assert a.created is True
    assert b.created is True
    assert a.run.id != b.run.id
    # Runs without a key never collide.
    c = await backend.create_run(new_run("wf", input=1))
    d = await backend.create_run(new_run("wf", input=1))
    assert c.created is True
    assert d.created is True


async def test_same_key_different_input_returns_the_existing_run(backend: Backend) -> None:
    first = await backend.create_run(new_run(input={"a": 1}, idempotency_key="k"))
    again = new_run(input={"a": 2}, idempotency_key="k", priority=1)
    result = await backend.create_run(again)
    assert result.created is False and result.run.id == first.run.id and result.input_differs
    assert await backend.get_run(again.id) is None
    assert [r.id for r in await _all_runs(backend)] == [first.run.id]
    stored = await backend.get_run(first.run.id)
    assert stored is not None
    assert stored.input == {"a": 1}
    assert stored.priority == 100
    assert await event_types(backend, first.run.id) == ["created", "duplicate_start"]
    events = await backend.get_events(first.run.id)
    assert events[-1].data == {"idempotency_key": "k", "input_differs": True}
    # The same input again records nothing more.
    same = await backend.create_run(new_run(input={"a": 1}, idempotency_key="k"))
    assert same.created is False and not same.input_differs
    assert await event_types(backend, first.run.id) == ["created", "duplicate_start"]


async def test_a_chosen_run_id_is_idempotent_and_unique_across_workflows(
    backend: Backend,
) -> None:
    first = await backend.create_run(new_run("wf", input=1, id="order-42"))
    assert first.created and first.run.id == "order-42"
    again = await backend.create_run(new_run("wf", input=1, id="order-42"))
    assert again.created is False and again.run.id == "order-42"
    with pytest.raises(ValidationError, match="already names a run of workflow 'wf'"):
        await backend.create_run(new_run("other", input=1, id="order-42"))
    assert [r.id for r in await _all_runs(backend)] == ["order-42"]


async def test_a_run_without_a_version_takes_the_claiming_workers_highest(
    backend: Backend,
) -> None:
    created = await backend.create_run(new_run("later", input=1, version=None))
    assert created.run.version is None
    assert await claim(backend, workflows=(("other", 1),)) == []
    claims = await claim(backend, workflows=(("later", 2), ("later", 3)))
    assert [c.run.id for c in claims] == [created.run.id]
    assert claims[0].run.version == 3
    stored = await backend.get_run(created.run.id)
    assert stored is not None and stored.version == 3


async def test_concurrent_same_key_creates_exactly_one_run(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    news = [new_run(input={"order": 42}, idempotency_key="once") for _ in range(20)]
    instances = [backend, other]
    results = await asyncio.gather(
        *(instances[i % 2].create_run(new) for i, new in enumerate(news))
    )
    winners = [r for r in results if r.created]
    assert len(winners) == 1
    winner_id = winners[0].run.id
    assert {r.run.id for r in results} == {winner_id}
    assert winner_id in {new.id for new in news}
    runs = await _all_runs(backend)
    assert [r.id for r in runs] == [winner_id]
    assert await event_types(backend, winner_id) == ["created"]


async def test_concurrent_same_key_with_two_inputs_makes_one_run(
    backend: Backend, backend_factory: BackendFactory
) -> None:
    other = await backend_factory()
    news = [new_run(input={"v": i % 2}, idempotency_key="once") for i in range(20)]
    instances = [backend, other]
    outcomes = await asyncio.gather(
        *(instances[i % 2].create_run(new) for i, new in enumerate(news))
    )
    runs = await _all_runs(backend)
    assert len(runs) == 1
    assert {o.run.id for o in outcomes} == {runs[0].id}
    assert len([o for o in outcomes if o.created]) == 1
    differing = [n for n in news if n.input_json != js(runs[0].input)]
    types = await event_types(backend, runs[0].id)
    assert types.count("duplicate_start") == len(differing) == 10


# --------------------------------------------------------------------------- list_runs


async def test_list_runs_is_newest_first_and_pages_with_a_cursor(backend: Backend) -> None:
    ids = [(await create(backend, input=i)).id for i in range(5)]
    newest_first = list(reversed(ids))

    page1 = await backend.list_runs(ListRunsParams(limit=2))
    assert [r.id for r in page1.items] == newest_first[:2]
    assert page1.next_cursor is not None
    page2 = await backend.list_runs(ListRunsParams(limit=2, cursor=page1.next_cursor))
    assert [r.id for r in page2.items] == newest_first[2:4]
    assert page2.next_cursor is not None
    page3 = await backend.list_runs(ListRunsParams(limit=2, cursor=page2.next_cursor))
    assert [r.id for r in page3.items] == newest_first[4:]
    assert page3.next_cursor is None

    everything = await backend.list_runs(ListRunsParams(limit=50))
    assert [r.id for r in everything.items] == newest_first
    assert everything.next_cursor is None


async def test_list_runs_cursor_is_none_when_the_last_page_is_full(backend: Backend) -> None:
    ids = [(await create(backend, input=i)).id for i in range(4)]
    page1 = await backend.list_runs(ListRunsParams(limit=2))
    assert page1.next_cursor is not None
    page2 = await backend.list_runs(ListRunsParams(limit=2, cursor=page1.next_cursor))
    assert [r.id for r in page2.items] == [ids[1], ids[0]]
    assert page2.next_cursor is None


async def test_list_runs_cursor_is_stable_under_new_inserts(backend: Backend) -> None:
    ids = [(await create(backend, input=i)).id for i in range(4)]
    page1 = await backend.list_runs(ListRunsParams(limit=2))
    newer = await create(backend, input="late")
    page2 = await backend.list_runs(ListRunsParams(limit=2, cursor=page1.next_cursor))
    seen = [r.id for r in page1.items] + [r.id for r in page2.items]
    assert seen == list(reversed(ids))
    assert newer.id not in seen


async def test_list_runs_orders_by_the_databases_creation_time_not_the_id(
    backend: Backend,
) -> None:
    # Ids from a producer whose clock runs behind, or chosen by the caller.
    first = await create(backend, input=1, id="zzz-first")
    second = await create(backend, input=2, id="aaa-second")
    third = await create(backend, input=3, id="mmm-third")
    page = await backend.list_runs(ListRunsParams(limit=2))
    assert [r.id for r in page.items] == [third.id, second.id]
    rest = await backend.list_runs(ListRunsParams(limit=2, cursor=page.next_cursor))
    assert [r.id for r in rest.items] == [first.id] and rest.next_cursor is None
    assert isinstance(page.items, list)


async def test_list_runs_filters_by_parent(backend: Backend) -> None:
    parent = await create(backend, input="parent")
    other = await create(backend, input="other")
    kids = [
        await create(backend, input=i, parent_id=parent.id, parent_step=f"child:{i}")
        for i in range(3)
    ]
    await create(backend, input="x", parent_id=other.id, parent_step="child")
    found = await _all_runs(backend, parent_id=parent.id)
    assert [r.id for r in found] == [k.id for k in reversed(kids)]
    assert await _all_runs(backend, parent_id="no-such-run") == []


@pytest.mark.parametrize("cursor", ["garbage!", "\udc80", "a\x00b", "Zm9v"])
async def test_list_runs_refuses_a_cursor_it_did_not_make(backend: Backend, cursor: str) -> None:
    await create(backend, input=1)
    with pytest.raises(ValidationError, match="cursor"):
        await backend.list_runs(ListRunsParams(limit=2, cursor=cursor))


async def test_list_runs_filters_by_workflow_and_status(backend: Backend) -> None:
    a1 = await create(backend, "alpha")
    b1 = await create(backend, "beta")
    a2 = await create(backend, "alpha")
    b2 = await create(backend, "beta", delay=3600)
    held = await claim_one(backend, workflows=(("beta", 1),))
    assert held.run.id == b1.id
    assert (await transition(backend, held, Complete(js("ok")))).ok
    cancelled = await create(backend, "alpha")
    assert await backend.cancel_run(cancelled.id) is True

    async def ids(**filters: Any) -> list[str]:
        return [r.id for r in await _all_runs(backend, **filters)]

    assert await ids(workflow="alpha") == [cancelled.id, a2.id, a1.id]
    assert await ids(workflow="beta") == [b2.id, b1.id]
    assert await ids(status="pending") == [b2.id, a2.id, a1.id]
    assert await ids(status="completed") == [b1.id]
    assert await ids(workflow="alpha", status="cancelled") == [cancelled.id]
    assert await ids(workflow="beta", status="cancelled") == []
    assert await ids(workflow="gamma") == []

    # Paging under a filter never leaks rows of other workflows.
    page1 = await backend.list_runs(ListRunsParams(workflow="alpha", limit=2))
    assert [r.id for r in page1.items] == [cancelled.id, a2.id]
    page2 = await backend.list_runs(
        ListRunsParams(workflow="alpha", limit=2, cursor=page1.next_cursor)
    )
    assert [r.id for r in page2.items] == [a1.id]
    assert page2.next_cursor is None


async def test_list_runs_since_is_inclusive_and_until_exclusive(backend: Backend) -> None:
    runs = []
    for i in range(3):
        created = await create(backend, input=i)
        stored = await backend.get_run(created.id)
        assert stored is not None
        runs.append(stored)
    a, b, c = runs
    assert a.created_at < b.created_at < c.created_at

    async def ids(**filters: Any) -> list[str]:
        return [r.id for r in await _all_runs(backend, **filters)]

    assert await ids(since=b.created_at) == [c.id, b.id]
    assert await ids(until=b.created_at) == [a.id]
    assert await ids(since=b.created_at, until=c.created_at) == [b.id]
    assert await ids(since=a.created_at, until=a.created_at) == []


async def test_list_runs_input_match_uses_json_containment(backend: Backend) -> None:
    r1 = await create(backend, input={"customer": {"id": 7, "tier": "gold"}, "tags": ["a", "b"]})
    r2 = await create(backend, input={"customer": {"id": 8}, "tags": ["b"]})
    r3 = await create(backend, input={"customer": {"id": 7}, "total": 1})
    r4 = await create(backend, input="just a string")
    r5 = await create(backend, input=[1, 2, 3])

    async def ids(match: Any) -> set[str]:
        return {r.id for r in await _all_runs(backend, input_match_json=js(match))}

    assert await ids({"customer": {"id": 7}}) == {r1.id, r3.id}
    assert await ids({"customer": {"id": 7, "tier": "gold"}}) == {r1.id}
    assert await ids({"tags": ["b"]}) == {r1.id, r2.id}
    assert await ids({"tags": ["b", "a"]}) == {r1.id}
    assert await ids({"total": 1.0}) == {r3.id}
    assert await ids({"total": "1"}) == set()
    assert await ids({"missing": None}) == set()
    assert await ids({}) == {r1.id, r2.id, r3.id}
    assert await ids("just a string") == {r4.id}
    assert await ids([3, 1]) == {r5.id}
    # Combined with another filter.
    filtered = await _all_runs(backend, workflow="other", input_match_json=js({}))
    assert filtered == []


# --------------------------------------------------------------------------- summaries


async def test_workflow_summaries_count_every_status(backend: Backend) -> None:
    await backend.register_workflows(
        [WorkflowRecord("alpha", 1), WorkflowRecord("alpha", 2), WorkflowRecord("wf", 2)]
    )
    beta = (("beta", 1),)

    done = await create(backend, "beta")
    held = await claim_one(backend, workflows=beta)
    assert held.run.id == done.id
    assert (await transition(backend, held, Complete(js(1)))).ok

    failed = await create(backend, "beta")
    held = await claim_one(backend, workflows=beta)
    assert held.run.id == failed.id
    assert (await transition(backend, held, Fail({"type": "Boom", "message": "x"}))).ok

    waiting = await create(backend, "beta")
    held = await claim_one(backend, workflows=beta)
    assert held.run.id == waiting.id
    later = (await backend.now()) + timedelta(hours=1)
    assert (await transition(backend, held, Park("sleep", later))).ok

    running = await create(backend, "beta")
    held = await claim_one(backend, workflows=beta)
    assert held.run.id == running.id

    cancelled = await create(backend, "beta")
    assert await backend.cancel_run(cancelled.id)

    await create(backend, "beta", delay=3600)
    await create(backend, "beta", delay=3600)
    await create(backend, "wf")

    summaries = await backend.workflow_summaries()
    assert [s.name for s in summaries] == ["alpha", "beta", "wf"]
    by_name = {s.name: s.counts for s in summaries}
    zeros = dict.fromkeys(RUN_STATUSES, 0)
    assert by_name["alpha"] == zeros
    assert by_name["beta"] == {
        "pending": 2,
        "running": 1,
        "waiting": 1,
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
    }
    assert by_name["wf"] == {**zeros, "pending": 1}


async def test_workflow_summaries_empty_database(backend: Backend) -> None:
    assert await backend.workflow_summaries() == []


async def test_idempotency_key_still_names_an_ended_run(backend: Backend) -> None:
    first = await backend.create_run(new_run(input=1, idempotency_key="k"))
    assert await backend.cancel_run(first.run.id)
    again = await backend.create_run(new_run(input=1, idempotency_key="k"))
    assert again.created is False
    assert again.run.id == first.run.id
    assert again.run.status == "cancelled"
