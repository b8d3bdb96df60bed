"""Cron schedules end to end on both backends, with the database clock moved instead of
waiting real minutes: one run per tick across worker processes, catch-up after a
downtime, a DST gap and overlap in Europe/Paris, pause and resume."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from perdure import App, Context, ValidationError
from perdure.schedules import due_ticks

from .helpers import wait_for

pytestmark = pytest.mark.timeout(180)


class DbClock:
    """Moves the test database's clock (the storage contract's clock offset)."""

    def __init__(self, database: Any) -> None:
        self.database = database

    def _call(self, what: str, *args: Any) -> Any:
        async def go() -> Any:
            backend = self.database.make_backend()
            await backend.open()
            try:
                await backend.migrate()
                return await getattr(backend, what)(*args)
            finally:
                await backend.close()

        return asyncio.run(go())

    def now(self) -> datetime:
        now: datetime = self._call("now")
        return now

    def to(self, moment: datetime) -> None:
        """Move the clock so it reads ``moment`` now (it only moves forward)."""
        offset = (moment - datetime.now(UTC)).total_seconds()
        self._call("set_clock_offset", offset)

    def forward(self, seconds: float) -> None:
        self.to(self.now() + timedelta(seconds=seconds))


def runs_of(app: App, workflow: str, **match: Any) -> list[Any]:
    items = app.list_runs(workflow=workflow, input_match=match or None, limit=1000).items
    return sorted(items, key=lambda r: r.input["scheduled_at"])


def ticks(app: App, workflow: str, **match: Any) -> list[str]:
    return [r.input["scheduled_at"] for r in runs_of(app, workflow, **match)]


def schedule_of(app: App, name: str) -> Any:
    return next(s for s in app.list_schedules() if s.name == name)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --------------------------------------------------------------------------- across processes

TICKER = textwrap.dedent(
    """
    from perdure import App, Context

    app = App()

    @app.workflow
    async def tick(ctx: Context, t: dict) -> str:
        return t["scheduled_at"]
    """
)


def test_three_worker_processes_fire_one_run_per_tick(database: Any, tmp_path: Path) -> None:
    (tmp_path / "ticker.py").write_text(TICKER)
    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": database.url,
        "PERDURE_SCHEMA": database.schema,
        "PYTHONPATH": str(tmp_path),
    }
    app = App(database.url, schema=database.schema, sweep_interval=0)
    clock = DbClock(database)
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    procs = []
    try:
        app.schedule("every-minute", "tick", "* * * * *", catch_up="all")
        # Read before any worker runs: a wall-clock minute may pass while they start,
        # and its tick, fired for real, belongs to the expected ticks too.
        first = schedule_of(app, "every-minute").next_at
        for log in logs:
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "perdure.cli.main", "worker", "ticker:app",
                         "--poll-interval", "0.2"],
                        cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                    )
                )  # fmt: skip
        wait_for(lambda: all(b" serving " in log.read_bytes() for log in logs), 60)
        for step in range(1, 6):
            clock.to(first + timedelta(seconds=60 * (step - 1) + 1))
            wait_for(lambda s=step: len(ticks(app, "tick")) >= s, 60)  # type: ignore[misc]
        last = clock.now()
        fired = ticks(app, "tick")
        expected = [t.isoformat() for t in due_ticks("* * * * *", "UTC", first, last)]
        wait_for(lambda: ticks(app, "tick") == expected, 60)
        for run in runs_of(app, "tick"):
            assert app.result(run.id, timeout=60) == run.input["scheduled_at"]
        assert len(set(fired)) == len(fired)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        app.close()


# --------------------------------------------------------------------------- catch-up


def test_catch_up_modes_after_a_downtime(app: App, database: Any) -> None:
    @app.workflow
    async def job(ctx: Context, t: dict[str, Any]) -> None:
        return None

    clock = DbClock(database)
    for mode in ("all", "latest", "none"):
        app.schedule(f"hourly-{mode}", job, "0 * * * *", input={"mode": mode}, catch_up=mode)
    first = schedule_of(app, "hourly-all").next_at
    # No worker for three and a half hours: the clock lands half past an hour.
    clock.to(first + timedelta(hours=2, minutes=30))
    missed = [t.isoformat() for t in due_ticks("0 * * * *", "UTC", first, clock.now())]
    assert len(missed) == 3
    with app.worker(concurrency=4):
        wait_for(lambda: ticks(app, "job", mode="all") == missed, 60)
        wait_for(lambda: ticks(app, "job", mode="latest") == missed[-1:], 60)
        wait_for(lambda: schedule_of(app, "hourly-none").next_at > clock.now(), 60)
        assert ticks(app, "job", mode="none") == []
        # Back on time, "none" fires the next tick.
        clock.to(first + timedelta(hours=3, seconds=1))
        wait_for(lambda: len(ticks(app, "job", mode="none")) == 1, 60)
    for mode in ("all", "latest", "none"):
        assert schedule_of(app, f"hourly-{mode}").next_at == first + timedelta(hours=4)


# --------------------------------------------------------------------------- time zones


def test_a_tick_in_the_skipped_hour_fires_at_the_first_valid_instant(
    app: App, database: Any
) -> None:
    @app.workflow
    async def nightly(ctx: Context, t: dict[str, Any]) -> None:
        return None

    clock = DbClock(database)
    # Europe/Paris springs forward on 2027-03-28 at 02:00 CET (01:00 UTC): 02:30 never
    # happens that night.
    clock.to(utc("2027-03-27T12:00:00"))
    app.schedule("nightly", nightly, "30 2 * * *", timezone="Europe/Paris", catch_up="all")
    assert schedule_of(app, "nightly").next_at == utc("2027-03-28T01:00:00")  # 03:00 CEST
    with app.worker(concurrency=2):
        clock.to(utc("2027-03-28T01:00:05"))
        wait_for(lambda: ticks(app, "nightly") == ["2027-03-28T01:00:00+00:00"], 60)
        clock.to(utc("2027-03-29T00:30:05"))  # 02:30 CEST the next night
        wait_for(lambda: len(ticks(app, "nightly")) == 2, 60)
    assert ticks(app, "nightly")[1] == "2027-03-29T00:30:00+00:00"


def test_a_tick_in_the_repeated_hour_fires_once(app: App, database: Any) -> None:
    @app.workflow
    async def nightly(ctx: Context, t: dict[str, Any]) -> None:
        return None

    clock = DbClock(database)
    # Europe/Paris falls back on 2027-10-31 at 03:00 CEST (01:00 UTC): 02:30 happens at
    # 00:30 UTC (CEST) and again at 01:30 UTC (CET).
    clock.to(utc("2027-10-30T12:00:00"))
    app.schedule("nightly", nightly, "30 2 * * *", timezone="Europe/Paris", catch_up="all")
    with app.worker(concurrency=2):
        clock.to(utc("2027-10-31T00:30:05"))
        wait_for(lambda: ticks(app, "nightly") == ["2027-10-31T00:30:00+00:00"], 60)
        clock.to(utc("2027-10-31T01:30:05"))  # the second 02:30: nothing more
        wait_for(lambda: schedule_of(app, "nightly").next_at == utc("2027-11-01T01:30:00"), 60)
        assert len(ticks(app, "nightly")) == 1
        clock.to(utc("2027-11-01T01:30:05"))
        wait_for(lambda: len(ticks(app, "nightly")) == 2, 60)


# --------------------------------------------------------------------------- management


def test_pause_skips_ticks_and_resume_fires_from_now(app: App, database: Any) -> None:
    @app.workflow
    async def job(ctx: Context, t: dict[str, Any]) -> Any:
        return t

    clock = DbClock(database)
    stored = app.schedule("minutely", job, "* * * * *", input={"x": 1}, catch_up="all")
    assert (stored.paused, stored.catch_up, stored.input) == (False, "all", {"x": 1})
    assert app.pause_schedule("minutely") is True
    assert schedule_of(app, "minutely").paused
    clock.forward(5 * 60)
    assert app.resume_schedule("minutely") is True
    resumed = schedule_of(app, "minutely")
    assert not resumed.paused and resumed.next_at > clock.now()
    clock.forward(5 * 60)
    assert app.resume_schedule("minutely") is True  # already active: nothing changes
    assert schedule_of(app, "minutely").next_at == resumed.next_at
    with app.worker(concurrency=2):
        # catch_up="all": the ticks missed since resuming fire, none from the pause.
        wait_for(lambda: len(ticks(app, "job")) >= 5, 60)
    fired = ticks(app, "job")
    assert fired[0] == resumed.next_at.isoformat()
    (first, *_) = runs_of(app, "job")
    assert first.input == {"x": 1, "scheduled_at": resumed.next_at.isoformat()}
    assert app.delete_schedule("minutely") is True
    assert app.list_schedules() == []
    assert app.delete_schedule("minutely") is False
    assert app.pause_schedule("minutely") is False
    assert app.resume_schedule("minutely") is False


def test_the_decorator_stores_a_schedule_named_after_the_workflow(app: App) -> None:
    @app.workflow(schedule="0 9 * * MON-FRI", timezone="Europe/Paris")
    async def daily_report(ctx: Context, tick: dict[str, Any]) -> None:
        return None

    (stored,) = app.list_schedules()
    assert (stored.name, stored.workflow, stored.cron, stored.timezone) == (
        "daily_report",
        "daily_report",
        "0 9 * * MON-FRI",
        "Europe/Paris",
    )
    local = stored.next_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5


def test_updating_a_schedule_keeps_its_next_tick_unless_its_cron_changes(app: App) -> None:
    first = app.schedule("s", "job", "0 * * * *")
    again = app.schedule("s", "job", "0 * * * *", input={"a": 1}, catch_up="none")
    assert again.next_at == first.next_at and again.input == {"a": 1}
    assert again.catch_up == "none"
    changed = app.schedule("s", "job", "30 * * * *")
    assert changed.next_at.minute == 30


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "not cron"}, "five fields"),
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"catch_up": "some"}, "catch_up"),
        ({"name": "bad name!"}, "schedule name"),
        ({"input": [1, 2]}, "must be a dict"),
    ],
)
def test_bad_schedules_are_refused_and_store_nothing(
    app: App, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"name": "s", "workflow": "job", "cron": "* * * * *"} | kwargs
    with pytest.raises(ValidationError, match=message):
        app.schedule(**args)
    assert app.list_schedules() == []
