"""The pure parts of schedules (ticks in a time zone, catch-up) and limits (parsing,
keys)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from perdure.errors import ConfigurationError, ValidationError
from perdure.limits import Limits, parse_rate_limit
from perdure.maintenance import ticks_to_fire
from perdure.records import Schedule
from perdure.schedules import check_cron, due_ticks, next_tick, tick_input


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def walk(cron: str, zone: str, start: str, n: int) -> list[str]:
    out, t = [], at(start)
    for _ in range(n):
        t = next_tick(cron, zone, t)
        out.append(t.isoformat())
    return out


def test_ticks_in_the_skipped_hour_fire_once_at_the_change() -> None:
    # Paris, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    assert walk("*/30 * * * *", "Europe/Paris", "2026-03-29T00:00:00", 3) == [
        "2026-03-29T00:30:00+00:00",  # 01:30 CET
        "2026-03-29T01:00:00+00:00",  # 02:00, 02:30 and 03:00 local: the change, once
        "2026-03-29T01:30:00+00:00",  # 03:30 CEST
    ]


def test_ticks_in_the_repeated_hour_fire_once() -> None:
    # Paris, 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC).
    assert walk("30 2 * * *", "Europe/Paris", "2026-10-24T12:00:00", 2) == [
        "2026-10-25T00:30:00+00:00",  # the first 02:30 (CEST)
        "2026-10-26T01:30:00+00:00",  # the next day's (CET); never 2026-10-25T01:30
    ]
    # Starting inside the repeated hour does not fire the repeat either.
    assert walk("30 2 * * *", "Europe/Paris", "2026-10-25T01:10:00", 1) == [
        "2026-10-26T01:30:00+00:00"
    ]


def test_new_york_gap_and_a_zone_without_dst() -> None:
    assert walk("30 2 * * *", "America/New_York", "2027-03-13T12:00:00", 1) == [
        "2027-03-14T07:00:00+00:00"  # 03:00 EDT, the first valid instant
    ]
    assert walk("0 9 * * *", "Asia/Tokyo", "2027-01-01T00:00:00", 1) == [
        "2027-01-02T00:00:00+00:00"
    ]


def test_due_ticks_and_catch_up() -> None:
    first = at("2027-01-01T00:00:00")
    now = at("2027-01-01T03:30:00")
    due = due_ticks("0 * * * *", "UTC", first, now)
    assert [t.hour for t in due] == [0, 1, 2, 3]

    def schedule(mode: str) -> Schedule:
        return Schedule("s", "wf", "0 * * * *", "UTC", mode, False, first)

    assert ticks_to_fire(schedule("all"), now) == (due, at("2027-01-01T04:00:00"))
    assert ticks_to_fire(schedule("latest"), now)[0] == due[-1:]
    assert ticks_to_fire(schedule("none"), now)[0] == []
    on_time = due[-1] + timedelta(seconds=5)
    assert ticks_to_fire(schedule("none"), on_time)[0] == due[-1:]


def test_tick_input_adds_scheduled_at() -> None:
    t = at("2027-01-01T00:00:00")
    assert tick_input({"a": 1}, t) == {"a": 1, "scheduled_at": "2027-01-01T00:00:00+00:00"}
    assert tick_input(None, t) == {"scheduled_at": "2027-01-01T00:00:00+00:00"}


@pytest.mark.parametrize("bad", ["", "* * * *", "* * * * * *", "99 * * * *", 5, None])
def test_bad_crons_are_refused(bad: Any) -> None:
    with pytest.raises(ValidationError):
        check_cron(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100/m", (100, 60.0)), ("5/s", (5, 1.0)), ("3 / 2h", (3, 7200.0)), ("10/30s", (10, 30.0))],
)
def test_rate_limits_parse(text: str, expected: tuple[int, float]) -> None:
    assert parse_rate_limit(text) == expected


@pytest.mark.parametrize("bad", ["100", "0/m", "x/m", "5/forever", "5/0s", 5, None])
def test_bad_rate_limits_are_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        parse_rate_limit(bad)


def test_the_lane_is_the_concurrency_key_else_fifo_else_rate_key() -> None:
    both = Limits.build(
        "wf",
        concurrency_key=lambda i: i["t"],
        key_concurrency=1,
        fifo_key=lambda i: i["a"],
        rate_limit="1/s",
        rate_limit_key=lambda i: i["r"],
    )
    keys = both.keys("wf", {"t": "T", "a": 7, "r": "R"})
    assert (keys.lane, keys.fifo, keys.rate) == ("T", "7", "R")
    fifo = Limits.build("wf", fifo_key=lambda i: i["a"]).keys("wf", {"a": "A"})
    assert (fifo.lane, fifo.fifo, fifo.rate) == ("A", "A", None)
    plain = Limits.build("wf", concurrency=2, rate_limit="1/s").keys("wf", None)
    assert (plain.lane, plain.fifo, plain.rate) == ("", None, "")
    assert not Limits().declared
