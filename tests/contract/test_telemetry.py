"""Contract: the database's gauges for metrics (`Backend.queue_gauges`) and the trace
context stored with a run (`NewRun.traceparent`, returned with its claims)."""

from __future__ import annotations

import pytest

from perdure.backends.base import Backend
from perdure.records import Complete

from .helpers import claim_one, create, transition

pytestmark = pytest.mark.timeout(60)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_queue_gauges_count_running_and_due_runs_per_workflow(backend: Backend) -> None:
    assert await backend.queue_gauges() == []
    await create(backend, "wf")
    await create(backend, "wf")
    await create(backend, "wf", delay=3600)  # not due: not in the queue
    await create(backend, "other")
    claim = await claim_one(backend, workflows=[("wf", 1)])
    gauges = {g.workflow: g for g in await backend.queue_gauges()}
    assert set(gauges) == {"wf", "other"}
    assert (gauges["wf"].running, gauges["wf"].due) == (1, 1)
    assert (gauges["other"].running, gauges["other"].due) == (0, 1)
    assert gauges["wf"].claim_lag >= 0 and gauges["other"].claim_lag >= 0
    await transition(backend, claim, Complete("1"))
    gauges = {g.workflow: g for g in await backend.queue_gauges()}
    assert (gauges["wf"].running, gauges["wf"].due) == (0, 1)


async def test_the_trace_context_of_a_start_comes_back_with_every_claim(backend: Backend) -> None:
    traced = await create(backend, "wf", traceparent=TRACEPARENT)
    claim = await claim_one(backend, workflows=[("wf", 1)])
    assert claim.run.id == traced.id and claim.traceparent == TRACEPARENT
    untraced = await create(backend, "wf")
    await transition(backend, claim, Complete("1"))
    claim = await claim_one(backend, workflows=[("wf", 1)])
    assert claim.run.id == untraced.id and claim.traceparent is None
