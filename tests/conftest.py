"""Shared test setup: markers, the PostgreSQL availability check, database fixtures.

Every suite that needs storage asks for one of:

* ``backend``: an opened, migrated `Backend`, parametrized over ``sqlite`` and
  ``postgres`` (test ids read ``test_x[sqlite]`` / ``test_x[postgres]``);
* ``backend_factory``: opens further instances on the same database as ``backend``
  (two "processes" racing);
* ``database``: the same parametrization as a small `Database` description
  (``.kind``, ``.url``, ``.schema``) for suites that build an `App` themselves.

PostgreSQL tests get a fresh schema each (``swt_<hex>``), dropped at teardown.
When the server is unreachable they are skipped, unless ``CI`` is set: then the
session fails at once, because the Postgres suite must never be skipped silently.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from perdure.backends import redact_url

if TYPE_CHECKING:
    from perdure.backends.base import Backend

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_URL = os.environ.get("PERDURE_TEST_DATABASE_URL") or DEFAULT_PG_URL

_pg_problem: str | None = None  # why PostgreSQL tests are skipped (None: reachable)

BACKEND_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]

_MARKERS = {
    "postgres": "needs the PostgreSQL server",
    "chaos": "kills real processes (tests/chaos)",
    "slow": "takes more than a few seconds",
}


# --------------------------------------------------------------------------- hooks


def pytest_configure(config: pytest.Config) -> None:
    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, text in _MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {text}")


def _check_postgres(url: str) -> str | None:
    """None if PostgreSQL answers at ``url`` within 3 s, else what went wrong."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'perdure[postgres]')"
    try:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _pg_problem
    problem = _check_postgres(PG_URL)
    if problem is None:
        _pg_problem = None
        return
    where = redact_url(PG_URL)
    if os.environ.get("CI"):
        pytest.exit(
            f"PostgreSQL is unreachable at {where} and CI is set: "
            f"the Postgres suite must not be skipped ({problem})",
            returncode=1,
        )
    _pg_problem = (
        f"PostgreSQL is unreachable at {where} ({problem}); set PERDURE_TEST_DATABASE_URL "
        "or start the server to run the Postgres tests"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _pg_problem is None:
        return
    skip = pytest.mark.skip(reason=_pg_problem)
    for item in items:
        if item.get_closest_marker("postgres") is not None:
            item.add_marker(skip)


# --------------------------------------------------------------------------- databases


@dataclass(frozen=True)
class Database:
    """Where a test's database lives: enough to build a backend or an `App` on it.

    ``url`` is what `perdure.App` / `create_backend` take; ``schema`` is the
    Postgres schema (``"perdure"`` for SQLite, where it means nothing).
    """

    kind: str
    url: str
    schema: str
    path: Path | None = None

    def make_backend(self) -> Backend:
        """A new, not yet opened backend instance on this database."""
        if self.kind == "sqlite":
            from perdure.backends.sqlite import SQLiteBackend

            assert self.path is not None
            return SQLiteBackend(self.path)
        if self.kind == "postgres":
            from perdure.backends.postgres import PostgresBackend

            return PostgresBackend(self.url, schema=self.schema)
        raise AssertionError(f"unknown database kind {self.kind!r}")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The PostgreSQL URL of the test server (skips when it is unreachable)."""
    if _pg_problem is not None:
        pytest.skip(_pg_problem)
    return PG_URL


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name ``swt_<hex>``; the schema is dropped (CASCADE) at teardown."""
    import psycopg
    from psycopg import sql

    name = f"swt_{secrets.token_hex(6)}"
    yield name
    with psycopg.connect(pg_dsn, connect_timeout=10, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def sqlite_database(tmp_path: Path) -> Database:
    path = tmp_path / "perdure.db"
    return Database(kind="sqlite", url=f"sqlite:///{path}", schema="perdure", path=path)


@pytest.fixture
def postgres_database(pg_dsn: str, pg_schema: str) -> Database:
    return Database(kind="postgres", url=pg_dsn, schema=pg_schema)


@pytest.fixture(params=BACKEND_PARAMS)
def database(request: pytest.FixtureRequest) -> Database:
    """A fresh database of each kind (SQLite file in tmp_path / Postgres schema)."""
    db: Database = request.getfixturevalue(f"{request.param}_database")
    return db


# --------------------------------------------------------------------------- backends


async def _opened(db: Database) -> Backend:
    instance = db.make_backend()
    await instance.open()
    try:
        await instance.migrate()
    except BaseException:
        await instance.close()
        raise
    return instance


@pytest.fixture
async def sqlite_backend(sqlite_database: Database) -> AsyncIterator[Backend]:
    """`SQLiteBackend(tmp_path / "perdure.db")`, opened and migrated."""
    instance = await _opened(sqlite_database)
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture
async def postgres_backend(postgres_database: Database) -> AsyncIterator[Backend]:
    """`PostgresBackend(pg_dsn, schema=pg_schema)`, opened and migrated."""
    instance = await _opened(postgres_database)
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """An opened, migrated backend of each kind on a fresh database."""
    instance: Backend = request.getfixturevalue(f"{request.param}_backend")
    return instance


BackendFactory = Callable[[], Awaitable["Backend"]]


@pytest.fixture
async def backend_factory(
    request: pytest.FixtureRequest, backend: Backend
) -> AsyncIterator[BackendFactory]:
    """``await backend_factory()`` opens (and migrates) another instance on the same
    database as ``backend``; every instance opened is closed at teardown."""
    db: Database = request.getfixturevalue(f"{backend.dialect}_database")
    opened: list[Backend] = []

    async def factory() -> Backend:
        instance = await _opened(db)
        opened.append(instance)
        return instance

    try:
        yield factory
    finally:
        for instance in reversed(opened):
            await instance.close()
