"""The checks every public entry applies to what a caller gives, before anything is
stored (DESIGN §4: names, keys, times, numbers; values are checked by
`perdure.serialization`). The SQL producers apply the same limits in SQL.

Each check returns the value it accepts or raises `ValidationError` in words a user
understands; lookups by run id raise `RunNotFound` for anything that names no run.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from .durations import moment
from .errors import PerdureError, RunNotFound, ValidationError

__all__ = [
    "ID_RULE",
    "MAX_KEY_LENGTH",
    "TIME_RANGE",
    "check_aware",
    "check_id",
    "check_int",
    "check_key",
    "check_moment",
    "check_time",
    "lookup_id",
]

#: Run ids and idempotency keys: 1 to this many characters.
MAX_KEY_LENGTH = 255
#: Times a caller gives (run_at, deadline) must lie within this of now.
TIME_RANGE = timedelta(days=36525)  # 100 years

#: What a run id or idempotency key may not hold, so that every id stored can be
#: addressed as one URL path segment: '/', '\', '?', '#', '%' and control characters
#: (C0, DEL, C1). The SQL producers mirror it (check_id in 10_check_key.sql).
_ID_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f/\\?#%]")
#: The rule in words, as errors and docs state it.
ID_RULE = (
    f"1-{MAX_KEY_LENGTH} characters, none of '/', '\\', '?', '#', '%' or a control "
    "character, and not '.' or '..'"
)


def _storable(text: str) -> bool:
    """No NUL, no lone surrogate: text both databases can store."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_key(value: object, what: str = "idempotency_key") -> str:
    """A key that is never a path segment (a debounce key, a step name to retry from):
    a string of 1-255 characters, no NUL or lone surrogate. Run ids and idempotency
    keys follow the stricter `check_id`."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LENGTH or not _storable(value):
        shown = repr(value)[:80]
        raise ValidationError(
            f"{what} must be a string of 1-{MAX_KEY_LENGTH} characters without NUL or lone "
            f"surrogates, got {shown}"
        )
    return value


def check_id(value: object, what: str = "idempotency_key") -> str:
    """A run id or idempotency key a caller chooses: `ID_RULE` (any other character,
    spaces, ':', '@' and non-ASCII letters included, is allowed)."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_KEY_LENGTH
        or value in (".", "..")
        or _ID_FORBIDDEN.search(value) is not None
        or not _storable(value)
    ):
        raise ValidationError(f"{what} must be {ID_RULE}; got {repr(value)[:80]}")
    return value


def lookup_id(run_id: object) -> str:
    """A run id to look up: anything that cannot name a run raises `RunNotFound`."""
    if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_KEY_LENGTH:
        raise RunNotFound(run_id)
    if not _storable(run_id):
        raise RunNotFound(run_id)
    return run_id


def check_int(
    value: object,
    what: str,
    *,
    minimum: int | None = None,
    error: type[PerdureError] = ValidationError,
) -> int:
    """An int (not a bool) within a 32-bit column, at least ``minimum`` if given;
    else ``error`` (`ConfigurationError` for settings) saying what was wrong."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an integer, got {value!r:.80}")
    if minimum is not None and value < minimum:
        raise error(f"{what} must be at least {minimum}, got {value}")
    if not -(2**31) <= value < 2**31:
        raise error(f"{what} {value} is out of range")
    return value


def is_number(value: object) -> bool:
    """True for an int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_aware(value: object, what: str) -> datetime:
    """A timezone-aware datetime."""
    if not isinstance(value, datetime):
        raise ValidationError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{what} must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return value


def check_moment(value: object, what: str) -> datetime:
    """A filter bound: a timezone-aware datetime, or text as `perdure.durations.moment`
    reads it (``"1h"`` ago, ``"2026-05-01"``, ``"2026-05-01T14:00:00Z"``)."""
    if isinstance(value, str):
        return moment(value, what=what)
    return check_aware(value, what)


def check_time(value: object, what: str) -> datetime:
    """A timezone-aware datetime within 100 years of now (when a run may start or must
    end; a filter bound such as ``since`` only needs `check_aware`)."""
    when = check_aware(value, what)
    now = datetime.now(UTC)
    if not now - TIME_RANGE <= when <= now + TIME_RANGE:
        raise ValidationError(f"{what} {when.isoformat()} is not within 100 years of now")
    return when
