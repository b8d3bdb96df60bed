"""The engine's pass, driven by a fake commit: no database, no worker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from perdure import Context, RetryPolicy
from perdure.engine.runner import Runner
from perdure.engine.services import PassResult, RunServices
from perdure.records import (
    Claim,
    Complete,
    Fail,
    Park,
    Retry,
    Run,
    Step,
    Transition,
    TransitionResult,
)
from perdure.workflow import Registry, define_workflow

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Body = Callable[[Context, Any], Awaitable[Any]]


class FakeCommit:
    """Records every transition; refuses them all once ``fenced`` is set."""

    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self.fenced = False

    async def __call__(self, transition: Transition) -> TransitionResult:
        if self.fenced:
            return TransitionResult(ok=False)
        self.transitions.append(transition)
        return TransitionResult(ok=True)

    def step_rows(self) -> list[tuple[str, str]]:
        return [(s.key, s.status) for t in self.transitions for s in t.steps]


def _claim(journal: tuple[Step, ...] = (), attempt: int = 1) -> Claim:
    run = Run(
        id="run-1", workflow="wf", version=1, status="running", input={"n": 2},
        output=None, error=None, attempt=attempt, priority=100, parent_id=None,
        created_at=NOW, started_at=NOW, completed_at=None, wake_at=None, deadline_at=None,
    )  # fmt: skip
    return Claim(run, 7, journal, (), NOW, 1, len(journal))


async def _pass(
    body: Body, claim: Claim | None = None, *, fenced: bool = False, **options: Any
) -> tuple[PassResult, FakeCommit]:
    registry = Registry()
    definition = define_workflow(body, name="wf", **options)
    registry.add(definition)
    commit = FakeCommit()
    commit.fenced = fenced
    with ThreadPoolExecutor(2) as pool:
        services = RunServices(commit, pool, registry, stopping=lambda: False)
        result = await Runner(claim or _claim(), definition, services).execute()
    return result, commit


def test_each_step_is_durable_before_the_next_runs_and_the_last_rides_with_the_ending() -> None:
    async def body(ctx: Context, data: dict[str, int]) -> int:
        a = await ctx.step.run("a", lambda: data["n"] + 1)
        return await ctx.step.run("b", lambda: a * 10)

    result, commit = asyncio.run(_pass(body))
    assert result.outcome == "completed"
    assert all(t.lease_token == 7 for t in commit.transitions)
    first, last = commit.transitions
    assert [s.key for s in first.steps] == ["a"] and first.outcome is None
    assert [s.key for s in last.steps] == ["b"]
    assert isinstance(last.outcome, Complete) and last.outcome.output_json == "30"


def test_a_journaled_step_replays_without_running() -> None:
    calls: list[str] = []

    async def body(ctx: Context, data: Any) -> int:
        a: int = await ctx.step.run("a", _record, calls)
        return a + 1

    journal = (Step("a", "run", "completed", 41, None, 1, NOW, NOW),)
    result, commit = asyncio.run(_pass(body, _claim(journal)))
    assert result.outcome == "completed" and calls == []
    last = commit.transitions[-1]
    assert isinstance(last.outcome, Complete) and last.outcome.output_json == "42"


def test_parallel_waits_park_once_with_every_row() -> None:
    async def body(ctx: Context, data: Any) -> None:
        await asyncio.gather(
            ctx.step.sleep("nap", "1h"),
            ctx.step.wait_for_event("approval"),
            ctx.step.run("work", lambda: 1),
        )

    result, commit = asyncio.run(_pass(body))
    assert result.outcome == "parked"
    park = commit.transitions[-1]
    assert isinstance(park.outcome, Park) and park.outcome.reason == "sleep"
    assert [w.event for w in park.waits] == ["approval"]
    assert sorted(s.key for s in park.steps) == ["nap", "work"]


def test_a_failing_step_parks_for_its_retry_then_fails_for_good() -> None:
    async def body(ctx: Context, data: Any) -> None:
        await ctx.step.run("boom", _boom, retry=RetryPolicy(max_attempts=2))

    result, commit = asyncio.run(_pass(body))
    assert result.outcome == "parked"
    assert commit.step_rows() == [("boom", "retrying")]
    assert commit.transitions[-1].step_attempts == 1

    retrying = Step("boom", "run", "retrying", None, {"type": "ValueError"}, 1, NOW, None)
    result, commit = asyncio.run(_pass(body, _claim((retrying,))))
    assert result.outcome == "failed"
    assert ("boom", "failed") in commit.step_rows()
    ending = commit.transitions[-1].outcome
    assert isinstance(ending, Fail) and ending.error["step"] == "boom"


def test_a_workflow_retry_policy_reopens_the_failed_step() -> None:
    async def body(ctx: Context, data: Any) -> None:
        await ctx.step.run("boom", _boom, retry=RetryPolicy(max_attempts=1))

    result, commit = asyncio.run(_pass(body, retry=RetryPolicy(max_attempts=2)))
    assert result.outcome == "retrying"
    ending = commit.transitions[-1].outcome
    assert isinstance(ending, Retry) and ending.reopen == ("boom",)


def test_compensation_runs_rollbacks_newest_first_as_steps() -> None:
    undone: list[str] = []

    async def body(ctx: Context, data: Any) -> None:
        await ctx.step.run("charge", lambda: "c", rollback=lambda out: undone.append(out))
        await ctx.step.run("ship", lambda: "s", rollback=lambda out: undone.append(out))
        raise RuntimeError("no stock")

    result, commit = asyncio.run(_pass(body))
    assert result.outcome == "failed" and undone == ["s", "c"]
    assert [k for k, _ in commit.step_rows()][-2:] == ["~rollback:ship", "~rollback:charge"]
    ending = commit.transitions[-1].outcome
    assert isinstance(ending, Fail) and ending.error["compensated"] == ["ship", "charge"]


def test_a_fenced_out_commit_abandons_the_pass_and_writes_nothing_more() -> None:
    async def body(ctx: Context, data: Any) -> None:
        await ctx.step.run("a", lambda: 1)
        await ctx.step.sleep("nap", "1m")  # the deferred row of a is committed here
        await ctx.step.run("never", lambda: 2)

    result, commit = asyncio.run(_pass(body, fenced=True))
    assert result.outcome == "abandoned" and commit.transitions == []


def _record(calls: list[str]) -> int:
    calls.append("a")
    return 1


def _boom() -> None:
    raise ValueError("boom")
