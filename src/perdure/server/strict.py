"""The strict value types of the REST edge: what the OpenAPI document says is what the
server takes. An integer is a JSON integer (never a boolean or a string), a number
is a JSON number, a time is an RFC 3339 date-time string with an offset (never a
number of seconds), and a status filter is one of the statuses the action can take."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from ..durations import MAX_SECONDS

__all__ = [
    "Cancellable",
    "Int32",
    "Retryable",
    "Seconds",
    "Status",
    "Time",
]

#: A JSON integer in a 32-bit column (a boolean or a string is refused).
Int32 = Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)]

#: A JSON number of seconds, 0 up to 100 years (a boolean or a string is refused).
Seconds = Annotated[float, Field(strict=True, ge=0, le=MAX_SECONDS)]

_RFC3339 = re.compile(
    r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)", re.ASCII
)
_EXAMPLE = "2026-11-28T15:00:00Z"


def _time(value: Any) -> datetime:
    """An RFC 3339 date-time with an offset; a number (a JSON one or a query string's
    digits) is refused, not read as seconds since 1970."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError(
            f"must be an RFC 3339 date-time with an offset, e.g. {_EXAMPLE}; got {value!r:.80}"
        )
    text = value.upper().replace("Z", "+00:00")
    whole, dot, rest = text.partition(".")
    if dot:  # Python reads at most microseconds: keep six digits of the fraction
        digits = re.match(r"\d+", rest)
        assert digits is not None
        text = f"{whole}.{digits.group()[:6].ljust(6, '0')}{rest[digits.end() :]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{value!r:.80} is not a real date-time") from None


#: A time: an RFC 3339 date-time string with an offset (``format: date-time``).
Time = Annotated[datetime, BeforeValidator(_time)]

#: Every run status, as a filter of the listing.
Status = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]

#: The statuses a bulk retry can take: the runs that ended without completing.
Retryable = Literal["failed", "cancelled"]

#: The statuses a bulk cancel can take: the live runs.
Cancellable = Literal["pending", "running", "waiting"]
