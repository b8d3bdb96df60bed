"""Bad input at the Python entries: a clear error, and nothing stored (issue: hardening)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from perdure import (
    App,
    Context,
    RunNotFound,
    SerializationError,
    ValidationError,
    WorkflowFailed,
)

from .helpers import raw_sql, wait_for


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


def test_a_run_whose_stored_data_cannot_be_decoded_fails_as_poison_and_the_worker_lives(
    app: App, database
) -> None:  # type: ignore[no-untyped-def]
    """Data written around the engine (by hand, or by an older producer) nested far past
    any decoder's reach: the worker fails that run as PoisonRun, keeps serving others, and
    listings still show it."""

    @app.workflow
    async def echo(ctx: Context, value: object) -> object:
        got = await ctx.step.wait_for_event("go")
        return [value, got]

    deep = "[" * 3000 + "]" * 3000
    in_input = app.start(echo, 1)
    in_journal = app.start(echo, 2)
    with app.worker(concurrency=2):
        wait_for(lambda: all(app.get_run(h.id).status == "waiting" for h in (in_input, in_journal)))
    raw_sql(database, "UPDATE runs SET input = ? WHERE id = ?", (deep, in_input.id))
    app.signal(in_journal.id, "go", "ok")  # the wait's journal row holds the payload...
    raw_sql(database, "UPDATE steps SET output = ? WHERE run_id = ?", (deep, in_journal.id))
    app.signal(in_input.id, "go", "ok")
    healthy = app.start(echo, 3)
    with app.worker(concurrency=2):
        for handle in (in_input, in_journal):
            with pytest.raises(WorkflowFailed) as failed:
                handle.result(timeout=20)
            assert failed.value.error["type"] == "PoisonRun"
            assert "cannot be decoded" in failed.value.error["message"]
        healthy.signal("go", "fine")
        assert healthy.result(timeout=20) == [3, "fine"]
    listed = {run.id: run for run in app.list_runs().items}
    assert str(listed[in_input.id].input).startswith("<undecodable")
    assert app.get_run(in_input.id).status == "failed"


@pytest.mark.parametrize("bad", ["\udc80", "a\x00b", "", "x" * 256, 42, None])
def test_a_run_id_that_names_no_run_is_run_not_found_at_every_lookup(app: App, bad: object) -> None:
    lookups: list[Callable[[Any], object]] = [
        app.get_run,
        app.get_steps,
        app.get_events,
        app.cancel,
        lambda run_id: app.signal(run_id, "go"),
        lambda run_id: app.result(run_id, timeout=1),
    ]
    for lookup in lookups:
        with pytest.raises(RunNotFound):
            lookup(bad)


@pytest.mark.parametrize("bad", ["\udc80", "a\x00b", "", "k" * 256])
def test_bad_keys_and_ids_are_refused_before_anything_is_stored(app: App, bad: str) -> None:
    @app.workflow
    async def waits(ctx: Context, _: object) -> object:
        return await ctx.step.wait_for_event("go")

    with pytest.raises(ValidationError, match="idempotency_key"):
        app.start(waits, 1, idempotency_key=bad)
    with pytest.raises(ValidationError, match="run_id"):
        app.start(waits, 1, run_id=bad)
    with pytest.raises(ValidationError, match="idempotency_key"):
        app.publish("go", 1, idempotency_key=bad)
    assert list(app.list_runs().items) == []
    handle = app.start(waits, None)
    with pytest.raises(ValidationError, match="idempotency_key"):
        app.signal(handle.id, "go", 1, idempotency_key=bad)
    with pytest.raises(ValidationError, match="cursor"):
        app.list_runs(cursor=bad or "?")
    with pytest.raises(ValidationError, match="parent_id"):
        app.list_runs(parent_id=bad)
    assert [e.type for e in app.get_events(handle.id)] == ["created"]


@pytest.mark.parametrize(
    "options",
    [
        {"run_at": datetime(2200, 1, 1, tzinfo=UTC)},
        {"run_at": datetime(1900, 1, 1, tzinfo=UTC)},
        {"deadline": datetime(9999, 1, 1, tzinfo=UTC)},
        {"delay": float("inf")},
        {"delay": float("nan")},
        {"priority": 2**40},
        {"retention_days": -1},
        {"version": 0},
    ],
)
def test_times_and_numbers_out_of_range_are_refused_at_start(
    app: App, options: dict[str, object]
) -> None:
    @app.workflow
    async def noop(ctx: Context, _: object) -> None:
        return None

    with pytest.raises(ValidationError):
        app.start(noop, 1, **options)  # type: ignore[arg-type]
    assert list(app.list_runs().items) == []
