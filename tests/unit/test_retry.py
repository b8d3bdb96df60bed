import math
import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from perdure import RetryAfter, RetryPolicy

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(min_value=0, max_value=50),
    backoff=st.sampled_from(["exponential", "linear", "fixed"]),
    initial=st.floats(min_value=0, max_value=10),
    max=st.just(120.0),
    factor=st.floats(min_value=1, max_value=5),
    jitter=st.floats(min_value=0, max_value=1),
)


@given(policies, st.integers(min_value=1, max_value=2000))
@example(RetryPolicy(max_attempts=0, initial=5e-324, max=120.0, factor=5.0, jitter=0), 442)
def test_base_delay_is_monotone_and_capped(policy: RetryPolicy, attempt: int) -> None:
    assert 0 <= policy.base_delay(attempt) <= policy.max_seconds
    assert policy.base_delay(attempt) <= policy.base_delay(attempt + 1) + 1e-9


@given(policies, st.integers(min_value=1, max_value=200), st.integers())
def test_jittered_delay_stays_within_the_spread_and_cap(
    policy: RetryPolicy, attempt: int, seed: int
) -> None:
    base = policy.base_delay(attempt)
    delay = policy.delay(attempt, random.Random(seed))
    assert 0 <= delay <= policy.max_seconds
    assert base * (1 - policy.jitter) - 1e-9 <= delay <= base * (1 + policy.jitter) + 1e-9


def test_schedules() -> None:
    exp = RetryPolicy(initial="1s", max="60s", jitter=0)
    assert [exp.base_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    lin = RetryPolicy(backoff="linear", initial="2s", max="7s", jitter=0)
    assert [lin.base_delay(n) for n in range(1, 5)] == [2, 4, 6, 7]
    fixed = RetryPolicy(backoff="fixed", initial="3s", jitter=0)
    assert {fixed.base_delay(n) for n in range(1, 10)} == {3}


def test_exhaustion() -> None:
    assert RetryPolicy(max_attempts=3).exhausted(3)
    assert not RetryPolicy(max_attempts=3).exhausted(2)
    assert not RetryPolicy(max_attempts=0).exhausted(10**6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": -1},
        {"max_attempts": 1.5},
        {"backoff": "random"},
        {"initial": "5s", "max": "1s"},
        {"factor": 0.5},
        {"jitter": 2},
        {"initial": "soon"},
    ],
)
def test_bad_policies_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_retry_after_parses_its_delay() -> None:
    assert RetryAfter("1m").delay == 60
    with pytest.raises(ValueError):
        RetryAfter("later")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"factor": math.nan},
        {"factor": math.inf},
        {"jitter": math.nan},
        {"factor": True},
    ],
)
def test_non_finite_numbers_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"finite|between"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
