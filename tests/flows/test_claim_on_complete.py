"""Claim on complete in a real worker: the commit that completes a task hands the
worker the tasks it unlocked, already leased; the worker runs them, renews their
leases and records each output once (both backends)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from perdure import App
from perdure.backends.base import Backend
from perdure.backends.postgres import PostgresBackend
from perdure.backends.sqlite import SQLiteBackend
from perdure.errors import BackendError
from perdure.flows.dsl import TaskContext
from perdure.records import Transition, TransitionResult


def test_the_tasks_a_commit_unlocked_are_handed_over_and_heartbeated(app: App) -> None:
    flow = app.flow("handoff")
    started = threading.Event()
    release = threading.Event()

    @flow.step
    def a(ctx: TaskContext, input: Any) -> int:
        return 1

    @flow.step(depends_on=[a])
    def b(ctx: TaskContext, input: Any) -> int:
        started.set()
        assert release.wait(30)
        return int(input["a"]) + 1

    @flow.step(depends_on=[b])
    def c(ctx: TaskContext, input: Any) -> int:
        return int(input["b"]) * 10

    with app.worker(concurrency=2, lease="0.3s"):
        handle = app.start(flow, None)
        assert started.wait(30)
        task_a, task_b = app.get_run(f"{handle.id}:a:0"), f"{handle.id}:b:0"
        # b was leased by the transaction that completed a (its database time)
        claimed = [e for e in app.get_events(task_b) if e.type == "claimed"]
        assert [e.created_at for e in claimed] == [task_a.completed_at]
        # held for several leases: heartbeats keep it this worker's (a lapsed lease
        # would show as lease_expired and a second claim)
        until = time.monotonic() + 1.2
        while time.monotonic() < until:
            assert [e.type for e in app.get_events(task_b)].count("claimed") == 1
            time.sleep(0.05)
        release.set()
        assert handle.result(timeout=30) == {"c": 20}
    events = [e.type for e in app.get_events(task_b)]
    assert events.count("claimed") == 1 and "lease_expired" not in events
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert [(s.status, s.attempts) for s in steps.values()] == [("completed", 1)] * 3


def test_a_task_end_whose_answer_was_lost_still_hands_over_its_tasks(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY B2 for claim on complete: the commit that completes ``a`` and leases
    ``b`` to the worker commits, then its answer is lost. The committer's retry is
    fenced out, and hands ``b`` over as the commit did: ``b`` runs at once, not after
    its lease lapses (300 s here), and no attempt is spent (one allowed)."""
    flow = app.flow("lost_answer", max_attempts=1, timeout=300)

    @flow.step
    def a(ctx: TaskContext, input: Any) -> int:
        return 1

    @flow.step(depends_on=[a])
    def b(ctx: TaskContext, input: Any) -> int:
        return int(input["a"]) + 1

    lost: list[str] = []
    for backend_type in (PostgresBackend, SQLiteBackend):
        real = backend_type.apply

        async def apply(
            self: Backend, transitions: Sequence[Transition], _real: Any = real
        ) -> list[TransitionResult]:
            results = await _real(self, transitions)
            handing = [t.run_id for t in transitions if t.claim is not None]
            if handing and not lost:
                lost.extend(handing)
                raise BackendError("connection lost after COMMIT was sent")
            return list(results)

        monkeypatch.setattr(backend_type, "apply", apply)

    with app.worker(concurrency=2):
        handle = app.start(flow, None)
        assert handle.result(timeout=30) == {"b": 2}
    assert lost == [f"{handle.id}:a:0"]
    events = [e.type for e in app.get_events(f"{handle.id}:b:0")]
    assert events.count("claimed") == 1 and "lease_expired" not in events
    assert [(s.status, s.attempts) for s in app.get_steps(handle.id)] == [("completed", 1)] * 2
