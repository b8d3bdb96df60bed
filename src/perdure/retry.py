"""Retry policies and the errors user code raises to steer retries."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from .durations import Duration, to_seconds
from .errors import PerdureError, ValidationError
from .validation import is_number

__all__ = ["NonRetriableError", "RetryAfter", "RetryPolicy"]

Backoff = Literal["exponential", "linear", "fixed"]


def _finite(value: object) -> bool:
    return is_number(value) and math.isfinite(value)  # type: ignore[arg-type]


class NonRetriableError(PerdureError):
    """Raise from a step (or the body) to fail it at once, without further attempts."""


class RetryAfter(PerdureError):
    """Raise from a step to retry it after exactly ``delay`` (still counts as an attempt).

    Args:
        delay: a duration ("30s", seconds, or a timedelta).
        message: optional text recorded with the attempt.
    """

    def __init__(self, delay: Duration, message: str | None = None) -> None:
        self.delay = to_seconds(delay, what="RetryAfter delay")
        super().__init__(message or f"retry after {self.delay:g}s")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how fast a failed step (or workflow body) is tried again.

    Attributes:
        max_attempts: attempts in all, the first included; 0 means unlimited.
            Default 3.
        backoff: ``"exponential"`` (initial * factor**(n-1)), ``"linear"``
            (initial * n) or ``"fixed"`` (initial). Default exponential.
        initial: delay before the second attempt. Default ``"1s"``.
        max: cap on any delay. Default ``"60s"``.
        factor: growth of exponential backoff. Default 2.0.
        jitter: fraction of random spread, 0 to 1 (0.2 = ±20%). Default 0.2.
    """

    max_attempts: int = 3
    backoff: Backoff = "exponential"
    initial: Duration = "1s"
    max: Duration = "60s"
    factor: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ValidationError(f"max_attempts must be an integer, got {self.max_attempts!r}")
        if self.max_attempts < 0:
            raise ValidationError(
                f"max_attempts must be 0 (unlimited) or more, got {self.max_attempts}"
            )
        if self.backoff not in ("exponential", "linear", "fixed"):
            raise ValidationError(
                f"backoff must be 'exponential', 'linear' or 'fixed', got {self.backoff!r}"
            )
        initial = to_seconds(self.initial, what="retry initial delay")
        cap = to_seconds(self.max, what="retry max delay")
        if cap < initial:
            raise ValidationError(
                f"retry max delay ({cap:g}s) is below the initial delay ({initial:g}s)"
            )
        if not _finite(self.factor) or self.factor < 1:
            raise ValidationError(f"factor must be a finite number >= 1, got {self.factor!r}")
        if not _finite(self.jitter) or not 0 <= self.jitter <= 1:
            raise ValidationError(f"jitter must be between 0 and 1, got {self.jitter!r}")

    @property
    def initial_seconds(self) -> float:
        """The initial delay in seconds."""
        return to_seconds(self.initial)

    @property
    def max_seconds(self) -> float:
        """The delay cap in seconds."""
        return to_seconds(self.max)

    def exhausted(self, attempts: int) -> bool:
        """True when ``attempts`` attempts used up the policy."""
        return self.max_attempts != 0 and attempts >= self.max_attempts

    def base_delay(self, attempt: int) -> float:
        """The delay (seconds, before jitter) after failed attempt number ``attempt`` (1-based)."""
        initial, cap = self.initial_seconds, self.max_seconds
        n = max(1, attempt)
        if self.backoff == "fixed":
            delay = initial
        elif self.backoff == "linear":
            delay = initial * n
        elif initial == 0 or self.factor == 1:
            delay = initial
        elif n - 1 >= math.log(cap / initial) / math.log(self.factor):
            delay = cap  # the cap wins long before huge attempt numbers overflow
        else:
            try:
                delay = initial * float(self.factor) ** (n - 1)
            except OverflowError:
                delay = cap
        return min(delay, cap)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The jittered delay after failed attempt ``attempt``, never above ``max``."""
        base = self.base_delay(attempt)
        if self.jitter:
            spread = base * self.jitter
            base += (rng or random).uniform(-spread, spread)
        return max(0.0, min(base, self.max_seconds))


DEFAULT_STEP_RETRY = RetryPolicy()
DEFAULT_WORKFLOW_RETRY = RetryPolicy(max_attempts=1)
