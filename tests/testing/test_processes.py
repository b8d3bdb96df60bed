"""A `TestEnvironment` reached by other processes: a real ``perdure worker`` started by
the test serves the environment's runs and judges its clock (`environ`,
`worker_command`), and ``schema=`` puts the environment where an app already looks."""

from __future__ import annotations

import os
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from perdure import App, Context
from perdure.errors import ConfigurationError
from perdure.testing import TestEnvironment

from ..engine.helpers import wait_for

pytestmark = pytest.mark.timeout(120)

WORKER_APP = textwrap.dedent(
    """
    import os
    from perdure import App, Context

    app = App()  # the database comes from PERDURE_DATABASE_URL / PERDURE_SCHEMA

    @app.workflow
    async def stamp(ctx: Context, input: object) -> str:
        return await ctx.step.run("pid", lambda: str(os.getpid()))
    """
)

stub = App("sqlite:///never-opened-by-these-tests.db")


@stub.workflow
async def stamp(ctx: Context, input: object) -> str:
    raise AssertionError("runs only in the worker process")


@stub.workflow
async def nap(ctx: Context, input: None) -> str:
    await ctx.step.sleep("a-week", "7d")
    return "woke"


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


@pytest.mark.postgres
def test_a_worker_process_serves_the_environment_and_fires_a_cron_tick_after_advance(
    pg_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "clock_app.py").write_text(WORKER_APP)
    with TestEnvironment(stub, pg_dsn, worker=False) as env:
        # midnight on the 1st of each month: never due before the test moves the clock
        env.schedule("monthly", "stamp", "0 0 1 * *")
        command = env.worker_command("clock_app:app", "--poll-interval", "0.2")
        proc = subprocess.Popen(
            command,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            handle = env.start("stamp")
            assert handle.result(timeout=60) == str(proc.pid)  # it serves our runs
            assert len(env.list_runs(workflow="stamp").items) == 1  # no tick yet
            env.advance("32d")  # past a 1st of the month by the environment's clock
            ticked = wait_for(
                lambda: [
                    r
                    for r in env.list_runs(workflow="stamp").items
                    if r.id != handle.id and r.status == "completed"
                ],
                timeout=60,
            )
            assert [r.output for r in ticked] == [str(proc.pid)]
            [schedule] = env.list_schedules()
            assert schedule.next_at > datetime.now(UTC) + timedelta(days=32)
        finally:
            out = _stop(proc)
        assert proc.returncode == 0, out


@pytest.mark.postgres
def test_the_environment_hands_out_its_schema(pg_dsn: str) -> None:
    with TestEnvironment(stub, pg_dsn, worker=False) as env:
        assert env.environ == {
            "PERDURE_DATABASE_URL": pg_dsn,
            "PERDURE_SCHEMA": env.settings.schema,
        }
        assert env.settings.schema.startswith("perdure_test_")
        command = env.worker_command("my_app:app", "--concurrency", "2")
        at = command.index("--schema")
        assert command[at + 1] == env.settings.schema
        assert command[command.index("--database") + 1] == pg_dsn
        assert command[-4:] == ["worker", "my_app:app", "--concurrency", "2"]
        for bad in ("no-colon", 3):
            with pytest.raises(ConfigurationError, match="module:attribute"):
                env.worker_command(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="must be strings"):
            env.worker_command("my_app:app", 2)  # type: ignore[arg-type]


@pytest.mark.postgres
def test_schema_puts_the_environment_where_the_app_looks_and_keeps_it(
    pg_dsn: str, pg_schema: str
) -> None:
    app = App(pg_dsn, schema=pg_schema)
    app.workflow(nap)
    try:
        with TestEnvironment(app, pg_dsn, schema=pg_schema) as env:
            handle = env.start(nap)
            env.advance("7d")
            assert handle.result(timeout=10) == "woke"
            # the app itself, another client on the same schema, sees the run and the clock
            seen = app.get_run(handle.id)
            assert seen.status == "completed"
            assert seen.completed_at is not None
            assert seen.completed_at > datetime.now(UTC) + timedelta(days=6)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (pg_schema,)).fetchone()
            assert row == (True,)  # kept: it is the app's, not the environment's
        with App(pg_dsn, schema=pg_schema) as again:
            assert again.get_run(handle.id).status == "completed"
    finally:
        app.close()


def test_schema_with_sqlite_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    for url in (None, f"sqlite:///{tmp_path / 'x.db'}"):
        with pytest.raises(ConfigurationError, match="SQLite database has no schemas"):
            TestEnvironment(stub, url, schema="perdure")
    assert list(tmp_path.iterdir()) == []
