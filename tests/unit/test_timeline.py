"""The dashboard's timeline and the traceback split, as pure functions: a month-long
sleep leaves every step readable, and the user's own frames are told apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from perdure.attempts import frames_of
from perdure.records import Event, Run, Step
from perdure.server.dashboard.timeline import MIN_SEGMENT, layout

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_30_day_sleep_is_compressed_and_labelled_and_each_attempt_is_a_segment() -> None:
    month = 30 * 86400.0
    run = Run(
        "r1", "wf", 1, "completed", None, None, None, 1, 0, None,
        T0, T0, _at(month + 0.05), None, None,
    )  # fmt: skip
    steps = [
        Step("before", "run", "completed", 1, None, 1, _at(0.001), _at(0.011)),
        Step("cool-off", "sleep", "completed", None, None, 1, _at(0.012), _at(month + 0.012)),
        Step("after", "run", "completed", 2, None, 2, _at(month + 0.03), _at(month + 0.04)),
    ]
    retried = {
        "step": "after",
        "attempt": 1,
        "delay": 0.01,
        "started": _at(month + 0.013).isoformat(),
        "error": {"type": "OSError", "message": "flaky"},
    }
    events = [Event("step_retrying", retried, _at(month + 0.02))]
    timeline = layout(run, steps, _at(month + 0.05), None, events)
    before, sleep, after = timeline.bars
    assert len(after.segments) == 2  # each attempt its own segment
    first, second = after.segments
    assert first.x + first.width <= second.x and "OSError: flaky" in first.title
    for segment in (*before.segments, *after.segments):
        assert segment.width >= MIN_SEGMENT
    # the ten-millisecond steps are not hairlines beside a month: together with the
    # gap between them they hold most of the chart, and the month is one labelled gap
    assert before.segments[0].width > 100 and after.segments[1].width > 100
    assert [gap.text for gap in timeline.gaps] == ["⋯ 30 d 00 h ⋯"]
    assert sleep.duration == "30 d 00 h"


def test_the_users_own_frames_are_told_apart_from_perdures_and_pythons() -> None:
    import perdure

    package = perdure.__file__.rsplit("/", 1)[0]
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{package}/engine/steps.py", line 84, in _run\n'
        "    value = await self._invoke(fn, timeout, key)\n"
        '  File "/usr/lib/python3.11/concurrent/futures/thread.py", line 58, in run\n'
        "    result = self.fn(*self.args, **self.kwargs)\n"
        '  File "/srv/shop/billing.py", line 7, in charge\n'
        '    raise LookupError("declined")\n'
        "LookupError: declined\n"
    )
    frames = frames_of(text)
    assert [f.own for f in frames] == [False, False, False, True, False]
    assert frames[3].text.startswith('  File "/srv/shop/billing.py"')
    assert frames[-1].text == "LookupError: declined"
