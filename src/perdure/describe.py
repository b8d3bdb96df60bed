"""Runs described in words, for people: the CLI and the dashboard say the same."""

from __future__ import annotations

from collections.abc import Sequence

from .records import Event, Run, Step

__all__ = ["is_flow_run", "waits_for"]


def is_flow_run(steps: Sequence[Step]) -> bool:
    """Whether ``steps`` (`get_steps`) are a DAG flow's run's: one per flow step,
    not a journal."""
    return bool(steps) and all(step.kind == "flow-task" for step in steps)


def waits_for(run: Run, events: list[Event]) -> str | None:
    """What a live run waits for, in words (None for a running or ended run)."""
    if run.status == "pending":
        if run.version is None:
            return f"a worker that serves {run.workflow} (no process has registered it yet)"
        return "a free worker" + ("" if run.wake_at is None else f", from {run.wake_at}")
    if run.status != "waiting":
        return None
    parked = next((e.data for e in reversed(events) if e.type == "waiting"), None) or {}
    until = "" if run.wake_at is None else f" (until {run.wake_at.isoformat()})"
    reason = run.wake_reason
    if reason == "event":
        names = ", ".join(parked.get("events") or []) or "an event"
        return f"event {names}{until}"
    if reason == "sleep":
        return f"a timer{until}"
    if reason == "retry":
        return f"its next attempt{until}"
    if reason == "child":
        return f"a child run{until}"
    if reason == "version":
        return f"a worker with version {run.version}{until}"
    if reason == "undecodable":
        return f"a worker that can open its sealed values (the codec and its key){until}"
    if reason == "divergence":
        return (
            "code that replays it: the deployed code no longer matches its journal "
            f"(replay diverged; see its error){until}. Roll the deploy back, or retry it "
            "from a step, or cancel it (docs/versioning.md)"
        )
    return f"a worker{until}"
