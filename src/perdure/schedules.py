"""Cron schedules, the pure part: parse, validate, and find ticks in a time zone.

Cron expressions are parsed and walked by `cronsim` over *wall-clock* times of the
schedule's IANA zone; each wall time is then placed on the UTC time line:

* A wall time that does not exist (the hour skipped when clocks go forward) fires at
  the first valid instant after it, the moment of the change: in Europe/Paris on the
  last Sunday of March, ``30 2 * * *`` fires at 03:00 CEST. Several ticks in that
  hour fire once, together.
* A wall time that happens twice (the hour repeated when clocks go back) fires once,
  at its first occurrence.

Firing (which ticks are due, catch-up, the runs) is `perdure.maintenance`'s job; the
storage is the backends'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ValidationError

__all__ = [
    "CATCH_UP_MODES",
    "LATE_TOLERANCE",
    "ScheduleSpec",
    "check_catch_up",
    "check_cron",
    "check_schedule_name",
    "check_timezone",
    "due_ticks",
    "next_tick",
]

#: What happens to ticks missed while no worker was up: every one of them fires
#: ("all"), only the most recent ("latest", the default), or none ("none").
CATCH_UP_MODES = ("latest", "all", "none")
#: With catch_up="none", a tick fires only if it is due less than this many seconds ago.
LATE_TOLERANCE = 60.0
#: At most this many ticks fire in one pass (catch_up="all" continues on the next).
MAX_TICKS_PER_PASS = 1000

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule as given to `App.schedule` (validated), before it is stored."""

    name: str
    workflow: str
    cron: str
    input_json: str | None
    timezone: str
    catch_up: str


def check_schedule_name(name: object) -> str:
    """Schedule names: 1-128 letters, digits, ``_ . : -``, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationError(
            f"invalid schedule name {name!r:.80}: use 1-128 letters, digits, '_', '.', ':' "
            "or '-', starting with a letter or digit"
        )
    return name


def check_cron(cron: object) -> str:
    """A five-field cron expression (``*/15 * * * *``, ``0 9 * * MON-FRI``)."""
    if not isinstance(cron, str) or not cron.strip() or len(cron) > 200:
        raise ValidationError(f"cron must be a cron expression string, got {cron!r:.80}")
    text = " ".join(cron.split())
    if len(text.split(" ")) != 5:
        raise ValidationError(
            f"cron {cron!r:.80} must have five fields: minute hour day month weekday"
        )
    try:
        CronSim(text, datetime(2000, 1, 1))  # noqa: DTZ001 - cron walks wall times
    except (CronSimError, ValueError, OverflowError) as exc:
        raise ValidationError(f"invalid cron expression {cron!r:.80}: {exc}") from None
    return text


def check_timezone(name: object) -> str:
    """An IANA time zone name (``"Europe/Paris"``, ``"UTC"``)."""
    if not isinstance(name, str) or not 1 <= len(name) <= 64:
        raise ValidationError(f"timezone must be an IANA zone name, got {name!r:.80}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory's name
        raise ValidationError(
            f"unknown time zone {name!r:.80} (use an IANA name such as 'Europe/Paris')"
        ) from None
    return name


def check_catch_up(mode: object) -> str:
    """One of `CATCH_UP_MODES`."""
    if mode not in CATCH_UP_MODES:
        raise ValidationError(
            f"catch_up must be one of {', '.join(CATCH_UP_MODES)}, got {mode!r:.80}"
        )
    assert isinstance(mode, str)
    return mode


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant a wall time of ``zone`` fires at (see the module docstring)."""
    first = wall.replace(tzinfo=zone, fold=0)
    utc = first.astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) == wall:
        return utc  # exists (the first occurrence, if it happens twice)
    # In a gap: fold=1 reads the wall time with the offset after the change, which
    # lands before it; fold=0 with the offset before, which lands after it. The
    # change is the first second in between whose offset is the later one.
    lo = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    hi = utc
    target = hi.astimezone(zone).utcoffset()
    while (hi - lo) > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(zone).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0) if hi.microsecond == 0 else hi


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick of ``cron`` in ``timezone`` strictly after the aware ``after`` (UTC)."""
    zone = ZoneInfo(timezone)
    # Walk wall times after `after`'s own; in a repeated hour a wall time maps to its
    # first occurrence, which may lie before `after` (already fired): skipped.
    wall = after.astimezone(zone).replace(tzinfo=None, fold=0)
    for count, candidate in enumerate(CronSim(cron, wall)):
        instant = _instant(candidate, zone)
        if instant > after:
            return instant
        if count > 100_000:  # pragma: no cover - five-field crons always match within years
            break
    raise ValidationError(f"cron {cron!r} has no tick after {after.isoformat()}")


def due_ticks(cron: str, timezone: str, first: datetime, now: datetime) -> list[datetime]:
    """The ticks from ``first`` (itself a tick) up to ``now``, at most `MAX_TICKS_PER_PASS`."""
    ticks: list[datetime] = []
    tick = first
    while tick <= now and len(ticks) < MAX_TICKS_PER_PASS:
        ticks.append(tick)
        tick = next_tick(cron, timezone, tick)
    return ticks


def tick_input(base: Any, tick: datetime) -> dict[str, Any]:
    """A tick's run input: the schedule's input dict with ``scheduled_at`` added."""
    value = dict(base) if isinstance(base, dict) else {}
    value["scheduled_at"] = tick.astimezone(UTC).isoformat()
    return value
