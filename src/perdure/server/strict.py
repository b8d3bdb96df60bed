"""The strict value types of the REST edge: what the OpenAPI document says is what the
server takes. An integer is a JSON integer (never a boolean or a string), a number
is a JSON number, a time is a string the CLI would take too (a duration ago, a date
or a date-time with an offset; never a number of seconds), and a status filter is
one of the statuses the action can take."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, WithJsonSchema

from ..durations import MAX_SECONDS, MOMENT_FORMS, MOMENT_PATTERN, moment
from ..errors import ValidationError

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


def _time(value: Any, info: ValidationInfo) -> datetime:
    """A time as `perdure.durations.moment` reads it (the CLI's one parser); a number
    or a boolean (a JSON one, or a query string's bare digits) is refused, not read as
    seconds."""
    if isinstance(value, datetime):
        return value
    what = info.field_name or "the time"
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string: {MOMENT_FORMS}; got {value!r:.80}")
    try:
        return moment(value, what=what)
    except ValidationError as exc:
        raise ValueError(str(exc)) from None


#: A time: a duration ago, a date (midnight UTC) or a date-time with an offset, as a
#: string (the OpenAPI document gives the pattern).
Time = Annotated[
    datetime,
    BeforeValidator(_time),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": f"^(?:{MOMENT_PATTERN})$",
            "description": f"A point in time: {MOMENT_FORMS}.",
            "examples": ["1h", "2026-05-01", "2026-05-01T14:00:00Z"],
        }
    ),
]

#: Every run status, as a filter of the listing.
Status = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]

#: The statuses a bulk retry can take: the runs that ended without completing.
Retryable = Literal["failed", "cancelled"]

#: The statuses a bulk cancel can take: the live runs.
Cancellable = Literal["pending", "running", "waiting"]
