"""Fuzz the value path end to end: any input either is refused at start with a clear
error and nothing stored, or runs, with every step, signal and output reading back
exactly what went in. Deep, wide, huge, odd Unicode and odd numbers, on both backends."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from perdure import App, Context, SerializationError, WorkflowFailed
from perdure.serialization import MAX_DEPTH

from .helpers import wait_for

any_text = st.text(alphabet=st.characters(), max_size=40)  # surrogates and NUL included
numbers = (
    st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # nan and infinities included
    | st.sampled_from([1e16, 1.5e300, -0.0, 5e-324, 2**63])
    | st.builds(pow, st.just(10), st.just(5000))  # past Python's int-to-text limit
)
scalars = st.none() | st.booleans() | numbers | any_text


def _deep(leaf: Any, depth: int) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


values = st.one_of(
    st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=6) | st.dictionaries(any_text, inner, max_size=6),
        max_leaves=30,
    ),
    st.builds(_deep, scalars, st.integers(min_value=50, max_value=200)),
    st.lists(st.integers(), min_size=500, max_size=2000),
    st.sampled_from(["x" * (10 * 1024 * 1024 + 1), "é" * (5 * 1024 * 1024 + 1)]),
)


def _depth(value: Any) -> int:
    """Levels of nesting, counted as `perdure.serialization.MAX_DEPTH` counts them."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        a = list(a)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def test_any_value_is_refused_cleanly_or_round_trips_exactly(app: App) -> None:
    @app.workflow
    async def echo(ctx: Context, value: Any) -> Any:
        stepped = await ctx.step.run("copy", lambda: value)
        signalled = await ctx.step.wait_for_event("echo")
        return {"step": stepped, "signal": signalled}

    stored: set[str] = set()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(value=values)
    @example(value=_deep(None, MAX_DEPTH))  # the output, wrapped once more, is too deep
    @example(value=_deep(None, MAX_DEPTH - 1))
    def one(value: Any) -> None:
        try:
            handle = app.start(echo, value)
        except SerializationError as exc:
            refused = str(exc)  # a sentence saying what was wrong
        else:
            refused = ""
        if refused:
            assert {r.id for r in app.list_runs(limit=1000).items} == stored  # nothing stored
            return
        stored.add(handle.id)
        assert _same(value, app.get_run(handle.id).input)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", timeout=30)
        assert app.signal(handle.id, "echo", value)
        if _depth(value) < MAX_DEPTH:
            assert _same({"step": value, "signal": value}, handle.result(timeout=30))
            return
        # An input exactly at the limit is stored, but the output wraps it once more.
        with pytest.raises(WorkflowFailed) as failed:
            handle.result(timeout=30)
        assert failed.value.error["type"] == "SerializationError"
        assert "output" in failed.value.error["message"]

    with app.worker(concurrency=4):
        one()
