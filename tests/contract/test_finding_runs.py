"""Finding runs: top-level runs only, by idempotency key of any workflow, and how many
children each run has (the dashboard's runs page), on both backends."""

from __future__ import annotations

import pytest

from perdure.backends.base import Backend
from perdure.flows.definition import FlowShape, StepShape
from perdure.records import ListRunsParams

from .helpers import create, new_run

pytestmark = pytest.mark.timeout(60)


async def _ids(backend: Backend, **filters: object) -> list[str]:
    page = await backend.list_runs(ListRunsParams(limit=100, **filters))  # type: ignore[arg-type]
    return [r.id for r in page.items]


async def test_top_level_leaves_children_out_and_counts_are_per_parent(
    backend: Backend,
) -> None:
    parent = await create(backend, input="parent")
    lonely = await create(backend, input="lonely")
    kids = [
        (await create(backend, input=i, parent_id=parent.id, parent_step=f"c:{i}")).id
        for i in range(3)
    ]
    everything = await _ids(backend)
    assert set(kids) <= set(everything)
    assert await _ids(backend, top_level=True) == [lonely.id, parent.id]
    assert await backend.count_children([parent.id, lonely.id, "no-such-run"]) == {parent.id: 3}
    assert await backend.count_children([]) == {}


async def test_a_run_is_found_by_its_idempotency_key_in_any_workflow(backend: Backend) -> None:
    await create(backend, "a", input=1, idempotency_key="other-key")
    keyed = await create(backend, "b", input=2, idempotency_key="order-42")
    assert await _ids(backend, idempotency_key="order-42") == [keyed.id]
    assert await _ids(backend, idempotency_key="order-43") == []
    assert await _ids(backend, idempotency_key="order-42", workflow="a") == []


async def test_a_flows_tasks_are_listed_only_when_asked(backend: Backend) -> None:
    await backend.register_flows([FlowShape("one", steps=(StepShape("only"),))])
    flow = (await backend.start_flow(new_run("one", version=None, input=1))).run
    [task] = (await backend.list_runs(ListRunsParams(parent_id=flow.id))).items
    assert task.id not in await _ids(backend)
    assert task.id in await _ids(backend, include_tasks=True)
    assert await _ids(backend, include_tasks=True, top_level=True) == [flow.id]
