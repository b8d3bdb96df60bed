"""A result() waiter takes how its run ended from the end notice only when the notice
says it in full and cannot predate a retry of the run."""

from __future__ import annotations

from perdure._end_waiters import end_told
from perdure.records import Notice

RUN = "run-1"


def test_nothing_is_taken_before_a_read_saw_the_run_live() -> None:
    # A notice that arrives before the waiter's first read may be the end of an
    # attempt a retry has since reopened.
    assert end_told([Notice("done", RUN, "completed", 0, "1")], None) is None


def test_an_end_of_an_earlier_attempt_is_stale() -> None:
    assert end_told([Notice("done", RUN, "failed", 0, '{"type": "X"}')], 1) is None
    assert end_told([Notice("done", RUN, "completed", 1, "1")], 1) == ("completed", 1, None)
    assert end_told([Notice("done", RUN, "completed", 2, "[1]")], 1) == ("completed", [1], None)


def test_what_a_notice_cannot_say_is_read() -> None:
    assert end_told([Notice("done", RUN)], 0) is None  # no status (SQLite, older code)
    assert end_told([Notice("wake")], 0) is None  # a reconnect: look again
    assert end_told([Notice("done", RUN, "completed", 0, None)], 0) is None  # too large
    assert end_told([Notice("done", RUN, "failed", 0, "not json")], 0) is None


def test_each_ending_is_told() -> None:
    assert end_told([Notice("done", RUN, "cancelled", 0, None)], 0) == ("cancelled", None, None)
    failed = end_told([Notice("done", RUN, "failed", 0, '{"type": "ValueError"}')], 0)
    assert failed == ("failed", None, {"type": "ValueError"})
    # The latest notice that says it in full wins; a bare wake after it changes nothing.
    told = [Notice("done", RUN, "completed", 0, "1"), Notice("wake")]
    assert end_told(told, 0) == ("completed", 1, None)
