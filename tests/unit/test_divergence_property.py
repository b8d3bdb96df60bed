"""Replay divergence as a property (issue 38), on the engine with an in-memory journal.

Random bodies (runs, sleeps, waits, children, gathers of parallel steps) run pass by
pass to their end; each pass replays the journal the earlier ones wrote, so replaying
the same code must never diverge. A random mutation of a body that has journaled
steps (a renamed, removed, inserted, reordered or re-kinded step) must diverge on
its next pass, unless it only appends (or only swaps calls inside one gather, which
replay by key: see the last test).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perdure import Context
from perdure.engine.runner import Runner
from perdure.engine.services import PassResult, RunServices
from perdure.records import Claim, Park, Run, Step, Transition, TransitionResult
from perdure.workflow import Registry, define_workflow

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Op = tuple[str, tuple[str, ...]]  # (kind, names): a gather has several names


class Store:
    """A run's journal and call order, as a backend would keep them."""

    def __init__(self) -> None:
        self.rows: dict[str, Step] = {}
        self.order: list[str] = []
        self.passes = 0

    async def commit(self, t: Transition) -> TransitionResult:
        for w in t.steps:
            if w.key not in self.rows or self.rows[w.key].status == "retrying":
                value = None if w.output_json is None else json.loads(w.output_json)
                at = w.completed_at or NOW
                self.rows[w.key] = Step(w.key, w.kind, w.status, value, None, 1, NOW, at)
        self.order.extend(t.asked)
        if isinstance(t.outcome, Park):  # what the wait or child ends with, at once
            for wait in t.waits:
                self.rows[wait.key] = Step(wait.key, "wait", "completed", 1, None, 1, NOW, NOW)
            for child in t.children:
                key = child.parent_step or ""
                self.rows[key] = Step(key, "child", "completed", 1, None, 1, NOW, NOW)
        return TransitionResult(ok=True)

    def claim(self) -> Claim:
        now = NOW + timedelta(days=self.passes)  # every sleep of an earlier pass is due
        run = Run(
            id="run-1", workflow="wf", version=1, status="running", input=None,
            output=None, error=None, attempt=1, priority=100, parent_id=None,
            created_at=NOW, started_at=NOW, completed_at=None, wake_at=None, deadline_at=None,
        )  # fmt: skip
        journal = tuple(sorted(self.rows.values(), key=lambda s: s.name))
        return Claim(run, 7, journal, (), now, 1, 0, call_order=tuple(self.order))


def _body(ops: list[Op]) -> Any:
    async def body(ctx: Context, _: Any) -> str:
        for kind, names in ops:
            if kind == "run":
                await ctx.step.run(names[0], lambda: 1)
            elif kind == "sleep":
                await ctx.step.sleep(names[0], "1h")
            elif kind == "wait":
                await ctx.step.wait_for_event(names[0])
            elif kind == "child":
                await ctx.step.run_workflow(names[0], "kid")
            else:
                await asyncio.gather(*(ctx.step.run(n, lambda: 1) for n in names))
        return "done"

    return body


async def _one_pass(ops: list[Op], store: Store, pool: ThreadPoolExecutor) -> PassResult:
    registry = Registry()
    definition = define_workflow(_body(ops), name="wf")
    registry.add(definition)
    store.passes += 1
    services = RunServices(store.commit, pool, registry, stopping=lambda: False)
    return await Runner(store.claim(), definition, services).execute()


def _run(ops: list[Op], store: Store, *, passes: int) -> list[str]:
    """Run up to ``passes`` passes of ``ops`` over ``store``: their outcomes."""

    async def go() -> list[str]:
        outcomes: list[str] = []
        with ThreadPoolExecutor(2) as pool:
            for _ in range(passes):
                result = await _one_pass(ops, store, pool)
                outcomes.append(result.outcome)
                if result.outcome != "parked":
                    break
        return outcomes

    return asyncio.run(go())


_KINDS = ("run", "run", "sleep", "wait", "child", "gather")


@st.composite
def bodies(draw: st.DrawFn) -> list[Op]:
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=1, max_size=8))
    ops: list[Op] = []
    for i, kind in enumerate(kinds):
        if kind == "gather":
            width = draw(st.integers(2, 5))
            ops.append((kind, tuple(f"g{i}-{j}" for j in range(width))))
        else:
            ops.append((kind, (f"{kind}{i}",)))
    return ops


def _parks(ops: list[Op]) -> int:
    return sum(1 for kind, _ in ops if kind in ("sleep", "wait", "child"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_the_same_code_never_diverges(ops: list[Op]) -> None:
    store = Store()
    outcomes = _run(ops, store, passes=_parks(ops) + 2)
    assert "diverged" not in outcomes
    assert outcomes[-1] == "completed", outcomes


def _asked_ops(ops: list[Op], store: Store) -> int:
    """How many ops of ``ops`` the journal's call order covers entirely."""
    asked = {entry.partition(":")[2] for entry in store.order}
    count = 0
    for _, names in ops:
        if not all(n in asked for n in names):
            break
        count += 1
    return count


@st.composite
def mutations(draw: st.DrawFn) -> tuple[list[Op], int, list[Op]]:
    """A body, how many of its parks code A passes, and the body mutated where the
    journal already holds its steps."""
    ops = draw(bodies().filter(lambda o: _parks(o) >= 1))
    stops = draw(st.integers(1, _parks(ops)))
    return ops, stops, ops  # mutated in the test, once the journal is known


def _mutate(data: st.DataObject, ops: list[Op], covered: int) -> list[Op]:
    i = data.draw(st.integers(0, covered - 1), label="position")
    kind, names = ops[i]
    choices = ["rename", "remove", "insert", "kind"]
    if i + 1 < covered:
        choices.append("swap")
    how = data.draw(st.sampled_from(choices), label="mutation")
    out = list(ops)
    if how == "rename":
        out[i] = (kind, (names[0] + "-renamed", *names[1:]))
    elif how == "remove":
        del out[i]
    elif how == "insert":
        out.insert(i, ("run", ("inserted",)))
    elif how == "kind":
        out[i] = ("sleep" if kind != "sleep" else "run", (names[0],))
    else:
        out[i], out[i + 1] = out[i + 1], out[i]
    return out


def test_parallel_calls_swapped_inside_one_gather_replay_by_key() -> None:
    """Calls swapped inside one gather replay without a divergence: parallel branches
    may reach their journaled steps in another order on replay, so an ask that is not
    next waits for the others (docs/versioning.md); both results are journaled."""
    ops: list[Op] = [("gather", ("a", "b")), ("sleep", ("nap",))]
    store = Store()
    assert _run(ops, store, passes=1) == ["parked"]
    assert _run([("gather", ("b", "a")), ("sleep", ("nap",))], store, passes=1) == ["completed"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(), st.data())
def test_a_mutated_body_diverges_unless_it_only_appends(
    case: tuple[list[Op], int, list[Op]], data: st.DataObject
) -> None:
    ops, stops, _ = case
    store = Store()
    outcomes = _run(ops, store, passes=stops)
    assert outcomes[-1] == "parked"
    covered = _asked_ops(ops, store)
    assert covered >= 1
    mutated = _mutate(data, ops, covered)
    appended = [*ops, ("run", ("appended",))]

    clean = Store()
    _run(ops, clean, passes=stops)
    assert "diverged" not in _run(appended, clean, passes=_parks(appended) + 2)

    result = _run(mutated, store, passes=1)
    assert result == ["diverged"], (ops, mutated, store.order)


def test_a_diverged_run_is_retried_with_a_backoff_from_5s_to_5min() -> None:
    from dataclasses import replace

    from perdure.engine.divergence import diverged_outcome

    run = Store().claim().run
    detail = {"position": 1, "journaled": {"name": "b", "kind": "run"}, "asked": None}
    delays = []
    for _ in range(9):
        transition, wake_at, message = diverged_outcome(run, 7, detail, NOW, fail=False)
        assert isinstance(transition.outcome, Park) and transition.outcome.reason == "divergence"
        assert wake_at is not None and "ended without asking for it" in message
        delays.append((wake_at - NOW).total_seconds())
        run = replace(run, error=transition.outcome.error)  # as the park stores it
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert [e.type for e in transition.events] == ["replay_diverged"]
