"""Parse durations: "500ms", "30s", "5m", "2h", "7d", "1h30m", seconds, or a timedelta."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from .errors import ValidationError

__all__ = ["Duration", "format_duration", "parse_duration", "to_seconds"]

Duration = str | int | float | timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_SECONDS = re.compile(r"\d{1,12}(?:\.\d{1,9})?")  # "5", "2.5": seconds (a CLI's --delay 5)
MAX_SECONDS = 100 * 365 * 86400.0


def parse_duration(value: Duration, *, what: str = "duration") -> timedelta:
    """Turn a duration into a ``timedelta``.

    Accepts ``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"7d"``, ``"1w"``, combinations
    such as ``"1h30m"``, a number of seconds (also as text: ``"5"``), or a
    ``timedelta``. Negative, NaN and absurdly long durations (over 100 years) are
    rejected with a ``ValueError`` that names ``what``.
    """
    return timedelta(seconds=to_seconds(value, what=what))


def to_seconds(value: Duration, *, what: str = "duration") -> float:
    """Like `parse_duration`, but returns seconds as a float."""
    if isinstance(value, bool):
        raise ValidationError(f"{what} must be a duration like '30s', got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if _SECONDS.fullmatch(text):
            text += "s"
        if not text or not _WHOLE.fullmatch(text):
            raise ValidationError(
                f"{what} {value!r} is not a duration; use e.g. '500ms', '30s', '5m', "
                "'2h', '7d', '1h30m' or a number of seconds"
            )
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    else:
        raise ValidationError(
            f"{what} must be a string like '30s', a number of seconds or a timedelta, "
            f"got {type(value).__name__}"
        )
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValidationError(f"{what} must be a finite duration, got {value!r}")
    if seconds < 0:
        raise ValidationError(f"{what} must not be negative, got {value!r}")
    if seconds > MAX_SECONDS:
        raise ValidationError(f"{what} {value!r} is longer than 100 years")
    return seconds


def format_duration(seconds: float) -> str:
    """Format seconds compactly ("1h30m", "250ms"); the inverse of `parse_duration`."""
    if seconds < 1 and seconds != 0:
        return f"{round(seconds * 1000)}ms"
    out = []
    rest = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out) or "0s"


def moment(text: str, *, what: str) -> datetime:
    """A point in time typed by a person: ISO 8601 (UTC when it has no offset) or a
    duration ago (``1h`` is one hour ago)."""
    try:
        return datetime.now(UTC) - timedelta(seconds=to_seconds(text, what=what))
    except ValidationError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            f"{what} must be an ISO 8601 time (2026-11-25T14:00) or a duration ago (1h), "
            f"got {text!r:.80}"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
