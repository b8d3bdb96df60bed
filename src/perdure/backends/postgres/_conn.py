"""PostgreSQL connection plumbing: the pool, one-statement calls, retries of
deadlocks and serialization failures, and one-round-trip pipelined transactions.

Driver errors leave this module as perdure errors (`translate_error`), with the
driver's error chained as the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import BackendError, ConfigurationError
from ...serialization import decode_stored
from .._sqlfiles import load_queries
from ._convert import translate_error

T = TypeVar("T")

log = logging.getLogger("perdure.backends.postgres")

QUERIES = load_queries(__package__)
_RETRYABLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_RETRY_ATTEMPTS = 8

Rows = list[tuple[Any, ...]]


class PgConnections:
    """A connection pool on one schema, and the ways the backend talks through it."""

    def __init__(
        self, dsn: str, schema: str, min_size: int, max_size: int, *, read_only: bool = False
    ) -> None:
        self.dsn = dsn
        self._read_only = read_only
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._pool: AsyncConnectionPool | None = None
        self._app_pool: AsyncConnectionPool | None = None
        self._app_pool_lock = asyncio.Lock()
        self._checker: asyncio.Task[None] | None = None

    @property
    def is_open(self) -> bool:
        """True between `open` and `close`."""
        return self._pool is not None

    def connect_kwargs(self) -> dict[str, Any]:
        """Connection options: the schema on the search path, UTC, generic plans,
        autocommit.

        Generic plans: a statement is planned once per connection, never per call.
        The engine's statements have one shape whatever their values, and their
        generic plans are checked (tests/backends/test_postgres_plans.py). Left to
        PostgreSQL's choice, a transition whose values fold parts of it away looked
        cheaper planned per call, and was: about 0.33 ms of planning per transition,
        more than it took to run (bench/RESULTS.md, 2026-11-26). A query whose filters
        are optional asks for a plan per call (`all(custom_plan=True)`). Read-only
        mode adds ``default_transaction_read_only``: PostgreSQL refuses every write."""
        options = (
            f"-c search_path={self._schema} -c TimeZone=UTC -c plan_cache_mode=force_generic_plan"
        )
        if self._read_only:
            options += " -c default_transaction_read_only=on"
        try:
            given = conninfo_to_dict(self.dsn).get("options")
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(f"invalid PostgreSQL connection string: {exc}") from None
        if given:
            options = f"{given} {options}"
        return {"autocommit": True, "options": options, "prepare_threshold": 5}

    async def open(self) -> None:
        """Open the pool (once)."""
        if self._pool is not None:
            return
        # One direct attempt first: an unreachable server or a bad password is one
        # clear error at once, not the pool's seconds of retries and warnings.
        try:
            probe = await psycopg.AsyncConnection.connect(
                self.dsn, connect_timeout=5, **self.connect_kwargs()
            )
        except psycopg.Error as exc:
            raise BackendError(f"cannot connect to PostgreSQL: {one_line(exc)}") from exc
        await probe.close()
        pool = AsyncConnectionPool(
            self.dsn,
            kwargs=self.connect_kwargs(),
            min_size=self._min_size,
            max_size=self._max_size,
            open=False,
            name=f"perdure-{self._schema}",
            configure=_configure,
            # Fail a checkout after 10 s and retry a lost connection for at most 5 s
            # at a time, so callers' own backoff (capped at 5 s) drives recovery after
            # a database restart instead of the pool's doubling delays.
            timeout=10.0,
            reconnect_timeout=5.0,
        )
        try:
            await pool.open(wait=True, timeout=15.0)
        except PoolTimeout:
            await pool.close()
            raise BackendError("cannot connect to PostgreSQL: the pool did not start") from None
        self._pool = pool

    async def close(self) -> None:
        """Close the pool."""
        checker, self._checker = self._checker, None
        if checker is not None and not checker.done():
            checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checker
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        app_pool, self._app_pool = self._app_pool, None
        if app_pool is not None:
            await app_pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pool connection; driver errors leave as perdure errors (cause chained)."""
        pool = self._pool
        if pool is None:
            raise BackendError("the PostgreSQL backend is not open (call open() first)")
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            self._after_failure(exc)
            raise translate_error(exc) from exc

    @asynccontextmanager
    async def app_connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection as the application sees the database (transactional steps):
        the connection string's own options and search path, not perdure's schema.
        Its pool opens on first use and is kept apart from perdure's, so whatever a
        user's function changes in its session never reaches perdure's connections."""
        if self._pool is None:
            raise BackendError("the PostgreSQL backend is not open (call open() first)")
        async with self._app_pool_lock:
            if self._app_pool is None:
                pool = AsyncConnectionPool(
                    self.dsn,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self._max_size,
                    open=False,
                    name=f"perdure-{self._schema}-app",
                    timeout=10.0,
                    reconnect_timeout=5.0,
                )
                try:
                    await pool.open(wait=True, timeout=15.0)
                except PoolTimeout:
                    await pool.close()
                    raise BackendError(
                        "cannot connect to PostgreSQL: the pool did not start"
                    ) from None
                self._app_pool = pool
            app_pool = self._app_pool
        try:
            async with app_pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise translate_error(exc) from exc

    def _after_failure(self, exc: psycopg.Error) -> None:
        """After a connection failure, let the pool weed out its dead connections."""
        pool = self._pool
        if not isinstance(exc, psycopg.OperationalError) or isinstance(exc, PoolTimeout):
            return
        if pool is None or (self._checker is not None and not self._checker.done()):
            return
        with contextlib.suppress(RuntimeError):
            self._checker = asyncio.get_running_loop().create_task(_check_pool(pool))

    async def one(
        self, query: LiteralString, params: dict[str, Any] | None = None
    ) -> tuple[Any, ...] | None:
        """The first row of one autocommit statement, or None."""
        rows = await self.all(query, params)
        return rows[0] if rows else None

    async def all(
        self,
        query: LiteralString,
        params: dict[str, Any] | None = None,
        *,
        custom_plan: bool = False,
    ) -> Rows:
        """Run one autocommit statement and fetch its rows. A deadlock or serialization
        failure rolled the statement back entirely, so it is retried.

        ``custom_plan``: plan the statement for its values on this call (a read whose
        optional filters fold away, so that the indexes of the given ones apply),
        in a one-round-trip transaction that sets it; otherwise the connection's
        generic plan.

        A statement whose loss in a database crash is harmless (claims, lease
        renewals) calls ``commit_unsynced()`` in its own SQL: it commits without
        waiting for the WAL flush, still one statement. A lost claim leaves the run
        claimable again, and any later durable write of that worker either flushes
        the claim first (the WAL is sequential) or is rejected by the fence.
        """

        async def once() -> Rows:
            async with self.connection() as conn:
                if not custom_plan:
                    cur = await conn.execute(query, params)
                else:
                    async with pipelined_transaction(conn):
                        await conn.execute(QUERIES["plan_per_call"])
                        cur = await conn.execute(query, params, prepare=False)
                rows: Rows = await cur.fetchall()
                return rows

        return await retrying(once, "statement")


async def retrying(attempt_once: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``attempt_once`` again after a deadlock or serialization failure: those
    rolled the whole transaction back, so a retry is safe."""
    delay = 0.005
    for attempt in range(1, _RETRY_ATTEMPTS + 1):
        try:
            return await attempt_once()
        except BackendError as exc:
            if not isinstance(exc.__cause__, _RETRYABLE) or attempt == _RETRY_ATTEMPTS:
                raise
            log.debug("%s hit %s; retrying", what, type(exc.__cause__).__name__)
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


@asynccontextmanager
async def pipelined_transaction(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """BEGIN, the statements the block sends, and COMMIT go out together and come back
    after one sync: one round trip (``conn.transaction()`` would add syncs around the
    block). An error aborts the transaction, COMMIT is then skipped and the connection
    rolled back before it goes back to the pool."""
    try:
        async with conn.pipeline():
            await conn.execute(QUERIES["begin"])
            yield
            await conn.execute(QUERIES["commit"])
    except BaseException:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
        raise


def one_line(exc: BaseException) -> str:
    """A driver message on one line (libpq's carry a line break and a tab)."""
    return " ".join(str(exc).split())


async def _check_pool(pool: AsyncConnectionPool) -> None:
    with contextlib.suppress(Exception):
        await pool.check()


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every pool connection decodes JSON with the guarded decoder: a value too deep or
    broken to decode becomes an `Undecodable` marker instead of failing the whole read
    (a claim of many runs, a page of a listing)."""
    set_json_loads(decode_stored, conn)
