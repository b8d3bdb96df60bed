"""Reliability scenarios of RELIABILITY.md that need neither killed processes nor a
restarted database: changed code under a running run (A13) and ambiguous commits (B2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from perdure import App, Context, WorkflowFailed
from perdure.backends.base import Backend
from perdure.errors import BackendError
from perdure.records import ClaimParams, Complete, StepWrite, Transition, TransitionResult
from perdure.worker.committer import Committer

from .helpers import wait_for


def test_changed_code_under_a_running_run_fails_it_instead_of_replaying_wrongly(
    database: Any,
) -> None:
    old = App(database.url, schema=database.schema, sweep_interval=0)
    new = App(database.url, schema=database.schema, sweep_interval=0)

    @old.workflow(name="changing")
    async def before(ctx: Context, _: None) -> None:
        await ctx.step.run("a", lambda: 1)
        await ctx.step.wait_for_event("go")

    # Same name and version, different shape: a bad deploy. The default parks such
    # runs (tests/engine/test_divergence.py); this workflow asks to fail them.
    @new.workflow(name="changing", on_divergence="fail")
    async def after(ctx: Context, _: None) -> None:
        await ctx.step.sleep("a", "1s")

    try:
        with old.worker():
            handle = old.start("changing")
            wait_for(lambda: handle.get().status == "waiting")
        with new.worker():
            handle.signal("go")
            with pytest.raises(WorkflowFailed) as info:
                handle.result(timeout=20)
        assert info.value.error["type"] == "NonDeterminismError"
        assert "replay diverged" in info.value.error["message"]
        assert info.value.error["journaled"] == {"name": "a", "kind": "run"}
        assert info.value.error["asked"] == {"name": "a", "kind": "sleep"}
    finally:
        old.close()
        new.close()


class ExecutedThenLost:
    """The real backend, except that the next ``failures`` `apply` calls commit and then
    report a lost connection (the "executed, then timeout" fault of RELIABILITY B2)."""

    def __init__(self, real: Backend, failures: int) -> None:
        self.real = real
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def apply(self, transitions: Sequence[Transition]) -> list[TransitionResult]:
        results = await self.real.apply(transitions)
        if self.failures > 0:
            self.failures -= 1
            raise BackendError("connection lost after COMMIT was sent")
        return results


async def test_a_commit_that_succeeded_but_looked_failed_is_retried_without_duplicates(
    backend: Backend,
) -> None:
    from perdure.ids import new_run_id
    from perdure.records import NewRun

    run_id = new_run_id()
    await backend.create_run(NewRun(run_id, "wf", 1, "null"))
    [claim] = await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
    faulty = ExecutedThenLost(backend, failures=1)
    committer = Committer(cast(Backend, faulty), give_up=10)
    step = StepWrite("a", "run", "completed", '{"v":1}')
    first = await committer.submit(Transition(run_id, claim.lease_token, steps=(step,)))
    # The retry found the row it had written itself: the stored row wins, same value.
    assert first.ok and [s.output for s in first.existing] in ([], [{"v": 1}])
    faulty.failures = 1
    done = await committer.submit(Transition(run_id, claim.lease_token, outcome=Complete("2")))
    # The retry of the completion is fenced out (the run is no longer running)...
    assert done.ok is False
    run = await backend.get_run(run_id)
    # ...but the first attempt did complete it, exactly once.
    assert run is not None and (run.status, run.output) == ("completed", 2)
    assert [s.name for s in await backend.get_steps(run_id)] == ["a"]
    assert [e.type for e in await backend.get_events(run_id)].count("completed") == 1
