"""`App(read_only=True)`: reads work, every write that would store something is refused
with `ReadOnlyDatabase` and stores nothing, and the schema is checked, never migrated.

On SQLite the app opens the file with SQLite's own ``mode=ro``, so SQLite itself
refuses the writes (even for root, whom file modes do not stop); on PostgreSQL its
connections run with ``default_transaction_read_only``. A file this process cannot
write is exercised through real processes in tests/cli/test_read_only.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from perdure import App, Context, ReadOnlyDatabase, SchemaVersionError
from tests.engine.helpers import raw_sql


def _define(app: App) -> None:
    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        return await ctx.step.run("hello", lambda: f"hi {name}")


@pytest.fixture
def populated(app: App) -> tuple[str, str]:
    """One completed run (with its step) and one pending run."""
    _define(app)
    done = app.start("greet", "ada")
    with app.worker(concurrency=1):
        assert app.result(done.id, timeout=30) == "hi ada"
    pending = app.start("greet", "bob")
    return done.id, pending.id


def test_a_read_only_app_reads_and_refuses_every_write(
    database,  # type: ignore[no-untyped-def]
    populated: tuple[str, str],
) -> None:
    done, pending = populated
    reader = App(database.url, schema=database.schema, read_only=True)
    _define(reader)  # registered in this process only: recording it would write
    try:
        assert {r.id for r in reader.list_runs(workflow="greet").items} == {done, pending}
        assert reader.get_run(done).output == "hi ada"
        assert [s.name for s in reader.get_steps(done)] == ["hello"]
        assert [w.name for w in reader.list_workflows()] == ["greet"]
        assert [e.type for e in reader.watch(done)][-1] == "completed"
        writes: dict[str, Callable[[], object]] = {
            "start": lambda: reader.start("greet", "eve"),
            "cancel": lambda: reader.cancel(pending),
            "signal": lambda: reader.signal(pending, "go", 1),
            "publish": lambda: reader.publish("topic.x", 1, idempotency_key="once"),
            "fork": lambda: reader.fork(done),
            "schedule": lambda: reader.schedule("nightly", "greet", "0 3 * * *"),
            "sweep": lambda: reader.sweep(),
            "migrate": lambda: reader.migrate(),
            "worker": lambda: reader.worker(),
        }
        for what, write in writes.items():
            with pytest.raises(ReadOnlyDatabase, match="read-only") as caught:
                write()
            assert caught.value.opened_read_only, what
        assert {r.id: r.status for r in reader.list_runs(workflow="greet").items} == {
            done: "completed",
            pending: "pending",
        }
        assert reader.list_schedules() == []
    finally:
        reader.close()


def test_read_only_mode_checks_the_schema_and_never_migrates(
    database,  # type: ignore[no-untyped-def]
    populated: tuple[str, str],
) -> None:
    version = _migrate(database)
    raw_sql(database, "DELETE FROM schema_version WHERE version = ?", (version,))
    reader = App(database.url, schema=database.schema, read_only=True)
    try:
        with pytest.raises(SchemaVersionError, match=f"version {version - 1}.*needs {version}"):
            reader.list_runs()
    finally:
        reader.close()
    # Nothing was migrated: the schema still lacks that version.
    check = App(database.url, schema=database.schema, read_only=True)
    try:
        with pytest.raises(SchemaVersionError, match=f"version {version - 1}"):
            check.list_runs()
    finally:
        check.close()


def _migrate(database) -> int:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, migrate=False)
    try:
        return app.migrate()
    finally:
        app.close()


def test_read_only_mode_creates_no_database(database) -> None:  # type: ignore[no-untyped-def]
    reader = App(database.url, schema=database.schema, read_only=True)
    try:
        expected = (ReadOnlyDatabase, "no SQLite database at")
        if database.kind == "postgres":
            expected = (SchemaVersionError, "holds no perdure schema")  # type: ignore[assignment]
        with pytest.raises(expected[0], match=expected[1]):
            reader.list_runs()
    finally:
        reader.close()
    if database.kind == "sqlite":
        assert not database.path.exists()


def test_perdure_read_only_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_READ_ONLY", "1")
    assert App("sqlite:///unused.db").settings.read_only is True
    monkeypatch.setenv("PERDURE_READ_ONLY", "0")
    assert App("sqlite:///unused.db").settings.read_only is False
