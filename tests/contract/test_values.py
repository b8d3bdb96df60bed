"""Values round-trip exactly through storage: a float stays that float, an int that int."""

from __future__ import annotations

import math
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.records import Complete, StepWrite

from .helpers import claim_one, completed, create, js, transition

TRICKY: list[Any] = [
    3.602879701896397e16,  # jsonb used to read this back as the int 36028797018963970
    1.5e300,  # and this as a 301-digit int
    1e16,
    -2.5e20,
    1e-7,
    5e-324,
    1.7976931348623157e308,
    0.1,
    1.0,
    2**70,  # an int beyond float precision stays exact
    -(2**63),
    {"e": "1e16 stays a string", "n": [1e22, "2e22", 3]},
    ["\u2028", "é", "💥", '"1e5"'],
]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON types all the way down (1.0 is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


@pytest.mark.parametrize("value", TRICKY, ids=lambda v: repr(v)[:30])
async def test_a_run_input_reads_back_exactly(backend: Backend, value: Any) -> None:
    run = await create(backend, input=value)
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert _same(stored.input, value), (value, stored.input)


@pytest.mark.parametrize("value", TRICKY, ids=lambda v: repr(v)[:30])
async def test_step_outputs_errors_and_run_output_read_back_exactly(
    backend: Backend, value: Any
) -> None:
    run = await create(backend)
    held = await claim_one(backend)
    # An error is stored as jsonb (numbers normalized): strings only, tricky ones.
    error = {"type": "Boom", "message": 'a "quote", a \\ backslash, \u2028, é, 💥, "1e5"'}
    steps = (completed("out", value), StepWrite("err", "run", "failed", None, error))
    assert (await transition(backend, held, Complete(js(value)), steps=steps)).ok
    out, err = await backend.get_steps(run.id)
    assert _same(out.output, value), (value, out.output)
    assert err.output is None
    assert err.error is not None and _same(err.error, error), (error, err.error)
    stored = await backend.get_run(run.id)
    assert stored is not None
    assert _same(stored.output, value), (value, stored.output)
