"""The one rule both backends apply to a new clock offset (`Backend.set_clock_offset`).

The offset is kept to the microsecond, the resolution both databases store times in,
so what `clock_offset` reads back is exactly what was set.
"""

from __future__ import annotations

import math

from ..errors import ValidationError
from ..validation import TIME_RANGE

__all__ = ["MAX_OFFSET", "check_offset"]

#: The furthest the clock may be moved ahead: 100 years, like every time a caller gives.
MAX_OFFSET = TIME_RANGE.total_seconds()


def check_offset(seconds: object, current: float) -> float:
    """``seconds`` as a clock offset to the microsecond: a finite number of seconds, at
    least ``current`` (the clock never runs backwards) and at most 100 years."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise ValidationError(f"a clock offset must be a number of seconds, got {seconds!r:.80}")
    if not math.isfinite(seconds):
        raise ValidationError(f"a clock offset must be finite, got {seconds}")
    offset = round(float(seconds), 6)
    if offset < 0:
        raise ValidationError(f"a clock offset cannot be negative, got {offset}")
    if offset > MAX_OFFSET:
        raise ValidationError(f"a clock offset of {offset} s is more than 100 years")
    if offset < current:
        raise ValidationError(
            f"the database clock never runs backwards: it is {current} s ahead, "
            f"cannot move it to {offset} s"
        )
    return offset
