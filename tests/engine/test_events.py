"""wait_for_event, signal, publish and subscriptions end to end, on both backends."""

from __future__ import annotations

import pytest

from perdure import App, Context, RunNotFound, SerializationError, ValidationError

from .helpers import wait_for


def _waiter(app: App) -> None:
    @app.workflow
    async def approval(ctx: Context, order: dict) -> object:
        await ctx.step.run("prepare", lambda: "ready")
        decision = await ctx.step.wait_for_event(
            "approved", match={"order": order["id"]}, timeout=order.get("timeout")
        )
        return {"decision": decision}


def _waiting(app: App, run_id: str) -> bool:
    run = app.get_run(run_id)
    return run.status == "waiting" and run.wake_reason == "event"


def test_signal_resolves_a_waiting_run_and_replay_returns_the_same_payload(app: App) -> None:
    _waiter(app)
    with app.worker():
        handle = app.start("approval", {"id": 7})
        wait_for(lambda: _waiting(app, handle.id))
        assert handle.signal("approved", {"order": 8, "by": "eve"}) is True  # no match: buffered
        assert app.signal(handle.id, "approved", {"order": 7, "by": "ada"}) is True
        assert handle.result(timeout=20) == {"decision": {"order": 7, "by": "ada"}}
    wait = next(s for s in app.get_steps(handle.id) if s.name == "approved")
    assert (wait.kind, wait.output) == ("wait", {"order": 7, "by": "ada"})
    types = [e.type for e in app.get_events(handle.id)]
    assert "waiting" in types and "signaled" in types


def test_a_signal_sent_before_the_wait_is_buffered(app: App) -> None:
    _waiter(app)
    handle = app.start("approval", {"id": 1})
    assert app.signal(handle.id, "approved", {"order": 1}) is True  # pending: buffered
    with app.worker():
        assert handle.result(timeout=20) == {"decision": {"order": 1}}


def test_timeout_returns_none(app: App) -> None:
    _waiter(app)
    with app.worker():
        assert app.run("approval", {"id": 2, "timeout": "200ms"}, timeout=20) == {"decision": None}


def test_signal_to_an_ended_or_unknown_run(app: App) -> None:
    _waiter(app)
    with app.worker():
        handle = app.start("approval", {"id": 3, "timeout": "0s"})
        handle.result(timeout=20)
    assert app.signal(handle.id, "approved", {"order": 3}) is False
    with pytest.raises(RunNotFound):
        app.signal("01ARZ3NDEKTSV4RRFFQ69G5FAV", "approved")
    with pytest.raises(ValidationError, match="event name"):
        app.signal(handle.id, "bad name")
    with pytest.raises(SerializationError):
        app.signal(handle.id, "approved", {1, 2})


def test_signal_racing_the_timeout_has_exactly_one_winner(app: App) -> None:
    _waiter(app)
    with app.worker(concurrency=10):
        handles = [app.start("approval", {"id": n, "timeout": "300ms"}) for n in range(20)]
        for n, handle in enumerate(handles):
            wait_for(lambda h=handle: h.get().status in ("waiting", "completed"))  # type: ignore[misc]
            app.signal(handle.id, "approved", {"order": n})
        outputs = [h.result(timeout=30) for h in handles]
    for handle, output in zip(handles, outputs, strict=True):
        journaled = next(s for s in app.get_steps(handle.id) if s.name == "approved").output
        assert output == {"decision": journaled}


def test_publish_resumes_waiters_and_starts_subscribers(app: App) -> None:
    @app.workflow
    async def listener(ctx: Context, _: None) -> object:
        return await ctx.step.wait_for_event("wait", event="user.signup", match={"plan": "pro"})

    @app.workflow(on=["user.*"])
    async def welcome(ctx: Context, payload: dict) -> str:
        return f"welcome {payload['name']}"

    @app.workflow
    async def audit(ctx: Context, payload: dict) -> str:
        return "audited"

    with app.worker(concurrency=5):
        waiting = [app.start(listener) for _ in range(3)]
        for h in waiting:
            wait_for(lambda h=h: _waiting(app, h.id))  # type: ignore[misc]
        assert app.subscribe("user.signup", audit) is True
        assert app.subscribe("user.signup", audit) is False
        free = app.publish("user.signup", {"name": "ada", "plan": "free"})
        assert free.resumed == () and len(free.started) == 2
        pro = app.publish(
            "user.signup", {"name": "bob", "plan": "pro"}, idempotency_key="signup-bob"
        )
        assert sorted(pro.resumed) == sorted(h.id for h in waiting) and len(pro.started) == 2
        again = app.publish(
            "user.signup", {"name": "bob", "plan": "pro"}, idempotency_key="signup-bob"
        )
        assert again == pro
        outputs = sorted(str(app.result(r, timeout=20)) for r in pro.started)
        assert outputs == ["audited", "welcome bob"]
        for h in waiting:
            assert h.result(timeout=20) == {"name": "bob", "plan": "pro"}
        assert app.unsubscribe("user.signup", audit) is True
        assert len(app.publish("user.signup", {"name": "cy"}).started) == 1
