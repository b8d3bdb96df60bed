"""The audit trail of sleeps and waits (issue 42): ``sleep_started`` when a sleep is
scheduled and its ``step_completed`` when it ends; ``wait_started`` when a wait is
registered, then ``step_completed`` when an event resolves it (or a timeout)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from perdure import App, Context, Event
from perdure.testing import TestEnvironment

from .helpers import wait_for


def _trail(env: App, run_id: str) -> list[Event]:
    return [
        e
        for e in env.get_events(run_id)
        if e.type in ("sleep_started", "wait_started", "step_completed", "resumed")
    ]


def test_a_sleep_and_a_wait_are_started_then_completed_at_their_times(
    app: App, database: Any
) -> None:
    @app.workflow
    async def cooling(ctx: Context, _: None) -> Any:
        await ctx.step.sleep("cool-off", "5m")
        approved = await ctx.step.wait_for_event("approve", timeout="1h")
        late = await ctx.step.wait_for_event("late", timeout="2h")
        return [approved, late]

    with TestEnvironment(app, database.url) as env:
        handle = env.start(cooling)
        wait_for(lambda: [e.type for e in _trail(env, handle.id)] == ["sleep_started"], 20)
        (started,) = _trail(env, handle.id)
        until = datetime.fromisoformat(started.data["until"])
        assert started.data == {"step": "cool-off", "until": until.isoformat()}
        # (the pass's clock, an estimate, set `until`; the database stamped the event)
        assert abs(until - started.created_at - timedelta(minutes=5)) < timedelta(seconds=5)

        env.advance("4m")  # not due yet: the sleep has not completed
        assert [e.type for e in _trail(env, handle.id)] == ["sleep_started"]

        env.advance("1m5s")
        wait_for(lambda: len(_trail(env, handle.id)) == 3, 20)
        _, completed, waiting = _trail(env, handle.id)
        assert (completed.type, completed.data) == (
            "step_completed",
            {"step": "cool-off", "kind": "sleep"},
        )
        assert completed.created_at == until  # when the sleep ended, not when scheduled
        assert waiting.type == "wait_started"
        assert waiting.data["step"] == "approve" and waiting.data["event"] == "approve"
        assert (
            datetime.fromisoformat(waiting.data["timeout_at"])
            > waiting.created_at
            > started.created_at
        )

        assert env.signal(handle.id, "approve", {"ok": True})
        wait_for(lambda: len(_trail(env, handle.id)) == 5, 20)
        env.advance("2h1m")  # the second wait times out
        assert handle.result(timeout=20) == [{"ok": True}, None]

        trail = [(e.type, e.data.get("step"), e.data.get("kind")) for e in _trail(env, handle.id)]
        assert trail == [
            ("sleep_started", "cool-off", None),
            ("step_completed", "cool-off", "sleep"),
            ("wait_started", "approve", None),
            ("step_completed", "approve", "wait"),
            ("wait_started", "late", None),
            ("step_completed", "late", "wait"),
            ("resumed", "late", None),  # {"timed_out": true}, in the same transition
        ]
        times = [e.created_at for e in _trail(env, handle.id)]
        assert times == sorted(times)


def test_a_sleep_cut_short_by_a_cancel_never_completes(app: App, database: Any) -> None:
    @app.workflow
    async def dozing(ctx: Context, _: None) -> None:
        await ctx.step.sleep("1h")

    with TestEnvironment(app, database.url) as env:
        handle = env.start(dozing)
        wait_for(lambda: [e.type for e in _trail(env, handle.id)] == ["sleep_started"], 20)
        assert env.cancel(handle.id)
        env.advance("2h")
        assert env.get_run(handle.id).status == "cancelled"
        assert [e.type for e in _trail(env, handle.id)] == ["sleep_started"]
