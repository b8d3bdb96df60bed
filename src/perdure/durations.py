"""Parse durations: "500ms", "30s", "5m", "2h", "7d", "1h30m", seconds, or a timedelta."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from .errors import ValidationError

__all__ = [
    "MOMENT_FORMS",
    "MOMENT_PATTERN",
    "Duration",
    "format_duration",
    "moment",
    "parse_duration",
    "to_seconds",
]

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


#: A point in time as a person or a client writes it, and as every entry takes it
#: (REST's ``since``/``until``, the CLI's ``--since``/``--until``, the dashboard's
#: filters, `App.list_runs`): a duration ago (``1h``, ``30m``, ``1h30m``, ``7d``), a date
#: (``2026-05-01``, midnight UTC) or a date-time with an offset
#: (``2026-05-01T14:00:00Z``, ``2026-05-01T16:00+02:00``; seconds and a fraction are
#: optional). A bare number is refused: seconds ago and seconds since 1970 look alike.
MOMENT_PATTERN = (
    r"(?:[0-9]{1,12}(?:\.[0-9]{1,9})?(?:ms|s|m|h|d|w))+"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[Tt][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2}))?"
)
_MOMENT = re.compile(MOMENT_PATTERN, re.ASCII)
#: The forms of `MOMENT_PATTERN` in words, as errors and docs state them.
MOMENT_FORMS = (
    "an ISO 8601 time with an offset (2026-05-01T14:00:00Z), a date (2026-05-01, "
    "midnight UTC) or a duration ago (30m, 1h, 7d)"
)


def moment(text: str, *, what: str) -> datetime:
    """A point in time written as `MOMENT_PATTERN` says: a duration ago (``1h`` is one
    hour ago), a date (midnight UTC) or a date-time with an offset. Anything else
    raises `ValidationError` naming ``what``."""
    if not isinstance(text, str) or not _MOMENT.fullmatch(text):
        raise ValidationError(f"{what} must be {MOMENT_FORMS}; got {text!r:.80}")
    given = text
    if text[-1].isalpha() and text[-1] not in "Zz":  # a duration ago
        return datetime.now(UTC) - timedelta(seconds=to_seconds(text, what=what))
    if len(text) == 10:  # a date
        text += "T00:00:00+00:00"
    text = text.upper().replace("Z", "+00:00")
    whole, dot, rest = text.partition(".")
    if dot:  # Python reads at most microseconds: keep six digits of the fraction
        digits = len(rest) - 6  # the offset, "+hh:mm", is the last six characters
        text = f"{whole}.{rest[:digits][:6].ljust(6, '0')}{rest[digits:]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"{what} {given!r:.80} is not a real date or time") from None
