"""Claim on complete in a real worker: the commit that completes a task hands the
worker the tasks it unlocked, already leased; the worker runs them, renews their
leases and records each output once (both backends)."""

from __future__ import annotations

import threading
import time
from typing import Any

from perdure import App
from perdure.flows.dsl import TaskContext


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
