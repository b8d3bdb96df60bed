from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perdure import parse_duration
from perdure.durations import format_duration, to_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("7d", 604800),
        ("1h30m", 5400),
        ("1w", 604800),
        (" 2m 5s ", 125),
        (12, 12),
        (0.25, 0.25),
        ("5", 5),  # a number of seconds as text, as a CLI option gives it
        ("2.5", 2.5),
        (timedelta(minutes=3), 180),
    ],
)
def test_parses(text: object, seconds: float) -> None:
    assert to_seconds(text) == pytest.approx(seconds)  # type: ignore[arg-type]
    assert parse_duration(text) == timedelta(seconds=seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", ["", "5 minutes", "1e9", "m5", "-5s", -1, float("nan"), "1y", None, True, [1]]
)
def test_rejects_with_a_clear_message(bad: object) -> None:
    with pytest.raises(ValueError, match=r"duration|negative|finite|must be"):
        to_seconds(bad, what="sleep duration")  # type: ignore[arg-type]


def test_rejects_absurdly_long() -> None:
    with pytest.raises(ValueError, match="100 years"):
        to_seconds("40000d")


@given(st.integers(min_value=0, max_value=10**7))
def test_format_round_trips(seconds: int) -> None:
    assert to_seconds(format_duration(seconds)) == seconds


def test_moment_reads_a_duration_ago_a_date_or_a_date_time_with_an_offset() -> None:
    """The one parser of ``since``/``until`` (CLI, REST, dashboard, `App.list_runs`)."""
    from datetime import UTC, datetime

    from perdure import ValidationError
    from perdure.durations import moment

    before = datetime.now(UTC)
    assert before - timedelta(hours=1, seconds=1) < moment("1h", what="since") < before
    assert moment("2026-05-01", what="since") == datetime(2026, 5, 1, tzinfo=UTC)
    assert moment("2026-05-01T14:00Z", what="since") == datetime(2026, 5, 1, 14, tzinfo=UTC)
    east = moment("2026-05-01T16:00:00.5+02:00", what="since")
    assert east == datetime(2026, 5, 1, 14, 0, 0, 500000, tzinfo=UTC)
    for bad in ("5", "0.5", "2026-05-01T14:00", "2026-05-01 14:00Z", "2026-13-01", "1H", ""):
        with pytest.raises(ValidationError, match="since"):
            moment(bad, what="since")
