"""``replay_check`` and ``perdure runs export`` (issue 38): stored runs checked against
new code before a deploy, writing nothing."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from perdure import App, Context
from perdure.testing import export_run, replay_check

from .helpers import wait_for


def _snapshot(database: Any) -> dict[str, tuple[int, str]]:
    """Every table's row count and a checksum of its rows."""
    tables: dict[str, tuple[int, str]] = {}
    if database.kind == "sqlite":
        conn = sqlite3.connect(database.url.split("sqlite:///", 1)[1])
        try:
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            names = [r[0] for r in listed]
            for name in names:
                rows = sorted(repr(r) for r in conn.execute(f'SELECT * FROM "{name}"'))
                tables[name] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest())
        finally:
            conn.close()
        return tables
    with psycopg.connect(database.url, autocommit=True) as pg:
        names = [
            r[0]
            for r in pg.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (database.schema,)
            )
        ]
        for name in names:
            digest = "md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"
            row = pg.execute(
                f'SELECT count(*), {digest} FROM "{database.schema}"."{name}" t'  # type: ignore[arg-type]
            ).fetchone()
            assert row is not None
            tables[name] = (int(row[0]), str(row[1]))
    return tables


@pytest.fixture
def apps(database: Any) -> Iterator[list[App]]:
    made: list[App] = []
    yield made
    for app in made:
        app.close()


def _app(database: Any, second: str) -> App:
    """Code whose body names its second step by the input's parity (the old code) or
    always ``second`` (the new code)."""
    app = App(database.url, schema=database.schema, sweep_interval=0)

    @app.workflow(name="deployed")
    async def deployed(ctx: Context, n: int) -> str:
        await ctx.step.run("one", lambda: n)
        name = ("two" if n % 2 else "zwei") if second == "parity" else second
        await ctx.step.run(name, lambda: n)
        await ctx.step.wait_for_event("go")
        return "done"

    return app


def test_replay_check_reports_exactly_the_runs_that_diverge_and_writes_nothing(
    database: Any, apps: list[App], tmp_path: Path
) -> None:
    old = _app(database, "parity")
    new = _app(database, "two")
    apps += [old, new]
    with old.worker(concurrency=20):
        ids = [old.start("deployed", n).id for n in range(200)]
        wait_for(
            lambda: Counter(r.wake_reason for r in old.list_runs(limit=1000).items)["event"] == 200,
            timeout=120,
        )
    even = {run_id for n, run_id in enumerate(ids) if n % 2 == 0}
    new.list_runs(limit=1)  # opened (and migrated) before the snapshot
    before = _snapshot(database)

    found = replay_check(new)

    assert {d.run_id for d in found} == even
    sample = next(d for d in found)
    assert sample.position == 1 and sample.workflow == "deployed" and sample.version == 1
    assert sample.journaled == {"name": "zwei", "kind": "run"}
    assert sample.asked == {"name": "two", "kind": "run"}
    assert replay_check(old) == []  # the code they ran on replays every one cleanly
    assert _snapshot(database) == before

    # The same from a history kept as a file (perdure runs export).
    path = tmp_path / "run.json"
    path.write_text(json.dumps(export_run(old, sample.run_id)))
    assert [d.run_id for d in replay_check(new, files=[path])] == [sample.run_id]
    assert replay_check(old, files=[path]) == []
    assert _snapshot(database) == before
