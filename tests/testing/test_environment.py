"""`perdure.testing.TestEnvironment` on both backends: days of timers, timeouts,
deadlines and retry backoff pass under `advance` with no real waiting (each test's
real time is bounded by its timeout, far below the time it skips), and
``auto_advance`` finishes a workflow of long sleeps by itself."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from perdure import App, Context, RetryAfter, TaskContext, WorkflowFailed, current_step
from perdure.errors import ConfigurationError, TimeoutError, ValidationError
from perdure.testing import TestEnvironment

from ..engine.helpers import wait_for

pytestmark = pytest.mark.timeout(90)

app = App("sqlite:///never-opened-by-these-tests.db")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@app.workflow
async def nap(ctx: Context, input: None) -> str:
    await ctx.step.sleep("a-week", "7d")
    return "woke"


@app.workflow
async def verify(ctx: Context, input: dict[str, str]) -> str:
    got = await ctx.step.wait_for_event("verify", match={"user": input["user"]}, timeout="3d")
    return "timed out" if got is None else f"verified {got['user']}"


@app.workflow(deadline="1d")
async def bounded(ctx: Context, input: None) -> str:
    await ctx.step.sleep("too-long", "7d")
    return "finished"


def _flaky() -> int:
    attempt = current_step().attempt
    if attempt == 1:
        raise RetryAfter("6h")
    return attempt


@app.workflow
async def backoff(ctx: Context, input: None) -> int:
    return await ctx.step.run("flaky", _flaky)


@app.workflow
async def seasons(ctx: Context, input: None) -> list[str]:
    seen = []
    for season in ("spring", "summer", "autumn"):
        await ctx.step.sleep(season, "91d")
        seen.append(season)
    got = await ctx.step.wait_for_event("winter", timeout="30d")
    seen.append("no winter" if got is None else "winter")
    return seen


@app.workflow
async def trial_then_reply(ctx: Context, input: None) -> list[str]:
    await ctx.step.sleep("trial", "30d")
    got = await ctx.step.wait_for_event("reply", timeout="7d")
    return ["slept", "no reply" if got is None else "replied"]


@app.workflow
async def ticks(ctx: Context, input: None) -> list[str]:
    seen = []
    for day in ("one", "two", "three"):
        await ctx.step.sleep(f"day-{day}", "1d")
        seen.append(day)
    return seen


# retries wait base_delay * 2**attempt: 12 hours, then 24
fetch = app.flow("fetch", max_attempts=3, base_delay=6 * 3600)


@fetch.step
async def page(ctx: TaskContext, input: object) -> str:
    if ctx.attempt < 3:
        raise RuntimeError("the site is down")
    return "fetched"


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str | None:
    """None: the environment's own SQLite file; else the PostgreSQL server's URL."""
    if request.param == "sqlite":
        return None
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


@pytest.fixture
def env(url: str | None) -> Iterator[TestEnvironment]:
    with TestEnvironment(app, url) as environment:
        yield environment


def _ahead(env: TestEnvironment) -> timedelta:
    """How far the environment's clock runs ahead of real time (to a second: real time
    goes on between the two reads)."""
    return env.now() - datetime.now(UTC) + timedelta(seconds=1)


def test_a_seven_day_sleep_fires_under_advance(env: TestEnvironment) -> None:
    handle = env.start(nap)
    env.advance("6d")
    assert env.get_run(handle.id).status == "waiting"  # a day early: still asleep
    env.advance("1d")
    assert handle.result(timeout=10) == "woke"
    assert timedelta(days=7) <= _ahead(env) < timedelta(days=7, minutes=5)


def test_one_advance_walks_a_sleep_then_a_wait_timeout(env: TestEnvironment) -> None:
    """Temporal's time skipping does this in one: the wait's 7 days count from when
    the 30-day sleep ends, inside the same advance."""
    handle = env.start(trial_then_reply)
    env.advance("37d")
    assert handle.result(timeout=10) == ["slept", "no reply"]
    trial, reply = env.get_steps(handle.id)
    assert trial.completed_at is not None and reply.completed_at is not None
    # each timer fired at its own due time, in order: the wait ended 7 days after the
    # sleep did, not at the same jump
    gap = reply.completed_at - trial.completed_at
    assert timedelta(days=7) <= gap < timedelta(days=7, minutes=5)
    assert timedelta(days=37) <= _ahead(env) < timedelta(days=37, minutes=5)


def test_each_run_sees_its_timers_fire_in_order_within_one_advance(
    env: TestEnvironment,
) -> None:
    early, late = env.start(ticks), env.start(ticks)
    env.advance("2d")  # two of three days: both runs are between their 2nd and 3rd sleep
    for handle in (early, late):
        assert env.get_run(handle.id).status == "waiting"
        assert [s.name for s in env.get_steps(handle.id)] == ["day-one", "day-two", "day-three"]
    env.advance("1d")
    assert early.result(timeout=10) == late.result(timeout=10) == ["one", "two", "three"]


@app.workflow
async def monthly(ctx: Context, input: object) -> str:
    return await ctx.step.run("report", lambda: "sent")


def test_a_flow_tasks_backoffs_are_stops_of_the_walk(env: TestEnvironment) -> None:
    """The task retries 12 hours in, fails again, and retries 24 hours after that: 36
    hours, within one advance of 37 (the flow's own run stays "running" meanwhile)."""
    handle = env.start(fetch, {})
    env.advance("37h")
    assert handle.result(timeout=10) == {"page": "fetched"}
    [step] = env.get_steps(handle.id)
    assert step.attempts == 3


def test_advance_returns_once_the_cron_tick_it_makes_due_has_run(env: TestEnvironment) -> None:
    env.schedule("monthly", monthly, "0 0 1 * *")  # never due before the clock moves
    env.advance("32d")  # past a 1st of the month; the worker fires it, advance waits
    [run] = env.list_runs(workflow="monthly").items
    assert run.status == "completed" and run.output == "sent"


def test_a_three_day_event_timeout_passes_under_advance(env: TestEnvironment) -> None:
    late = env.start(verify, {"user": "ann"})
    answered = env.start(verify, {"user": "bob"})
    env.advance("1d")
    assert env.signal(answered.id, "verify", {"user": "bob"})
    assert answered.result(timeout=10) == "verified bob"
    assert env.get_run(late.id).status == "waiting"
    env.advance("2d")
    assert late.result(timeout=10) == "timed out"


def test_a_deadline_passes_under_advance(env: TestEnvironment) -> None:
    handle = env.start(bounded)
    env.advance("1d")
    with pytest.raises(WorkflowFailed) as failed:
        handle.result(timeout=10)
    assert failed.value.error["type"] == "DeadlineExceeded"


def test_a_retry_backoff_passes_under_advance(env: TestEnvironment) -> None:
    handle = env.start(backoff)
    env.advance("5h")
    run = env.get_run(handle.id)
    assert run.status == "waiting"  # backing off for six hours
    env.advance("1h")
    assert handle.result(timeout=10) == 2
    [step] = env.get_steps(handle.id)
    assert step.attempts == 2


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_auto_advance_finishes_a_workflow_of_long_sleeps(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = None if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    with TestEnvironment(app, url, auto_advance=True) as env:
        assert env.run(seasons, timeout=30) == ["spring", "summer", "autumn", "no winter"]
        assert _ahead(env) >= timedelta(days=3 * 91 + 30)


async def test_async_usage(url: str | None) -> None:
    async with TestEnvironment(app, url) as env:
        handle = await env.start_async(nap)
        moved = await env.advance_async(timedelta(days=7))
        assert moved - datetime.now(UTC) > timedelta(days=7, seconds=-1)
        assert await env.now_async() >= moved
        assert await handle.result_async(timeout=10) == "woke"


def test_environments_on_one_postgres_keep_their_own_runs_and_clock(pg_dsn: str) -> None:
    with TestEnvironment(app, pg_dsn) as one, TestEnvironment(app, pg_dsn) as two:
        assert one.settings.schema != two.settings.schema
        handle = one.start(nap)
        one.advance("7d")
        assert handle.result(timeout=10) == "woke"
        assert _ahead(two) < timedelta(minutes=5)
        assert two.list_runs().items == []
        schema = one.settings.schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace(%s) IS NULL", (schema,)).fetchone()
        assert row == (True,)  # dropped at the end


def test_the_sqlite_file_is_fresh_and_removed_and_the_apps_own_is_untouched(
    tmp_path: Path,
) -> None:
    mine = App(f"sqlite:///{tmp_path / 'mine.db'}")
    mine.workflow(nap)  # the same body under the user's own app
    with TestEnvironment(mine) as env:
        url = env.settings.database_url
        path = Path(url.removeprefix("sqlite:///"))
        assert path.exists()
        env.start(nap)
        env.advance("7d")
    assert not path.parent.exists()
    assert not (tmp_path / "mine.db").exists()


def test_without_a_worker_runs_wait_and_advance_returns_at_once() -> None:
    with TestEnvironment(app, worker=False) as env:
        handle = env.start(nap)
        env.advance("30d")
        assert env.get_run(handle.id).status == "pending"
        with env.worker(concurrency=1, poll_interval="50ms"):
            wait_for(lambda: env.get_run(handle.id).status == "waiting")
            env.advance("7d")
            assert handle.result(timeout=10) == "woke"


def test_a_bad_duration_is_refused_and_the_clock_stays() -> None:
    with TestEnvironment(app) as env:
        before = _ahead(env)
        for bad in ("-1d", "soon", float("nan"), 200 * 365 * 86400):
            with pytest.raises(ValidationError):
                env.advance(bad)  # type: ignore[arg-type]
        assert _ahead(env) - before < timedelta(minutes=5)
        env.advance("36000d")
        handle = env.start(nap)
        with pytest.raises(ValidationError, match="more than 100 years"):
            env.advance("600d")  # refused before the walk's first stop (the nap's)
        assert env.get_run(handle.id).status in ("pending", "running", "waiting")
        assert _ahead(env) - before < timedelta(days=36000, minutes=5)


def test_advance_says_when_runs_do_not_settle() -> None:
    blocker = App("sqlite:///never-opened.db")
    release = threading.Event()

    @blocker.workflow
    async def stuck(ctx: Context, input: None) -> str:
        await ctx.step.run("block", release.wait, 30)
        return "released"

    with TestEnvironment(blocker) as env:
        handle = env.start(stuck)
        try:
            with pytest.raises(TimeoutError, match="did not settle"):
                env.advance("1d", timeout=0.5)
        finally:
            release.set()
        assert handle.result(timeout=10) == "released"


def test_the_app_is_not_a_test_class_and_the_clock_methods_have_twins() -> None:
    assert TestEnvironment.__test__ is False
    for name in ("now", "advance"):
        sync_fn, async_fn = (
            getattr(TestEnvironment, name),
            getattr(TestEnvironment, f"{name}_async"),
        )
        assert inspect.signature(sync_fn) == inspect.signature(async_fn)
        assert sync_fn.__doc__ and async_fn.__doc__
    with pytest.raises(Exception, match=r"takes your perdure\.App"):
        TestEnvironment(object())  # type: ignore[arg-type]


async def test_the_sync_fixture_serves_async_tests(env: TestEnvironment) -> None:
    handle = await env.start_async(nap)
    await env.advance_async("7d")
    assert await handle.result_async(timeout=10) == "woke"


def test_a_worker_asleep_for_an_hour_wakes_at_the_advance(url: str | None) -> None:
    """The worker knows the run sleeps a week and polls hourly: only the wake notice
    that moving the clock sends can make it claim the run within the test's time."""
    with (
        TestEnvironment(app, url, worker=False) as env,
        env.worker(concurrency=1, poll_interval="1h"),
    ):
        handle = env.start(nap)
        wait_for(lambda: env.get_run(handle.id).status == "waiting")
        env.advance("7d")
        assert handle.result(timeout=10) == "woke"


def test_a_bad_database_url_is_refused_at_once() -> None:
    with pytest.raises(ConfigurationError, match="unsupported database URL"):
        TestEnvironment(app, "mysql://nowhere/db")
