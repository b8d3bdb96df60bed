"""Waiting for the first of several events (DESIGN §4): Received(event, payload);
buffered signals count and the ones not taken stay buffered; a timeout gives None."""

from __future__ import annotations

from typing import Any

from perdure import App, Context, Received

from .helpers import wait_for


def _decide(app: App) -> Any:
    @app.workflow
    async def decide(ctx: Context, _: None) -> list[Any]:
        first = await ctx.step.wait_for_event("decision", event=["approved", "rejected"])
        assert isinstance(first, Received)
        # the event that lost is still buffered for a later wait
        other = "rejected" if first.event == "approved" else "approved"
        later = await ctx.step.wait_for_event("later", event=other, timeout="30s")
        return [first.event, first.payload, later]

    return decide


def test_the_first_event_to_arrive_wins_and_the_other_stays_buffered(app: App) -> None:
    decide = _decide(app)
    with app.worker():
        handle = app.start(decide)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 20)
        handle.signal("rejected", {"by": "bo"})
        wait_for(lambda: app.get_run(handle.id).wake_reason == "event" and
                 any(e.type == "signaled" for e in app.get_events(handle.id)), 20)  # fmt: skip
        handle.signal("approved", {"by": "al"})  # too late for the first wait: buffered
        assert handle.result(timeout=30) == ["rejected", {"by": "bo"}, {"by": "al"}]
    steps = {s.name: s.output for s in app.get_steps(handle.id)}
    assert steps["decision@rejected"] == {"by": "bo"} and "decision@approved" not in steps


def test_buffered_signals_count_and_the_loser_stays_buffered(app: App) -> None:
    decide = _decide(app)
    handle = app.start(decide)  # no worker yet: both signals are buffered
    handle.signal("approved", 1)
    handle.signal("rejected", 2)
    with app.worker():
        assert handle.result(timeout=30) == ["approved", 1, 2]


def test_a_timeout_gives_none_and_later_signals_are_kept(app: App) -> None:
    @app.workflow
    async def patient(ctx: Context, _: None) -> list[Any]:
        first = await ctx.step.wait_for_event("first", event=["a", "b"], timeout="0.2s")
        after = await ctx.step.wait_for_event("after", event="a")
        return [first, after]

    with app.worker():
        handle = app.start(patient)
        wait_for(lambda: any(e.type == "resumed" for e in app.get_events(handle.id)), 20)
        handle.signal("a", "late")
        assert handle.result(timeout=30) == [None, "late"]
