"""Bad input at the Python entries: a clear error, and nothing stored (issue: hardening)."""

from __future__ import annotations

import pytest

from perdure import App, Context, SerializationError, ValidationError


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def test_a_rejected_run_call_starts_nothing(app: App) -> None:
    @app.workflow
    async def noop(ctx: Context, _: object) -> None:
        return None

    with pytest.raises(ValidationError, match="timeout must not be negative"):
        app.run(noop, 1, timeout=-1)
    assert list(app.list_runs().items) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (_nested(65), "nested more than 64 levels"),
        ({"deep": _nested(970)}, "nested more than 64 levels"),
        ("x" * (10 * 1024 * 1024 + 1), "over the limit"),
        ("\ud800", "lone surrogate"),
        ("a\x00b", "NUL"),
        (float("nan"), "not JSON"),
    ],
    ids=["65-deep", "970-deep", "over-10MiB", "surrogate", "nul", "nan"],
)
def test_values_past_the_limits_are_refused_at_start_and_signal(
    app: App, value: object, message: str
) -> None:
    @app.workflow
    async def waits(ctx: Context, _: object) -> object:
        return await ctx.step.wait_for_event("go")

    with pytest.raises(SerializationError, match=message):
        app.start(waits, value)
    assert list(app.list_runs().items) == []
    handle = app.start(waits, None)
    with pytest.raises(SerializationError, match=message):
        app.signal(handle.id, "go", value)
    with pytest.raises(SerializationError, match=message):
        app.publish("go", value)
    assert [e.type for e in app.get_events(handle.id)] == ["created"]
