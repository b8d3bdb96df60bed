"""PostgreSQL-only behaviour of `PostgresBackend` (the shared contract lives in
tests/contract/): LISTEN/NOTIFY across instances and across a killed LISTEN
connection, the claim query's index, concurrent migrations and creates, and the
plpgsql producer functions called from another search_path.

Each test gets its own schema ``swt_<hex>``, dropped (CASCADE) afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from perdure._codec_backend import CodecBackend
from perdure._end_waiters import waiting_for_end
from perdure.backends._sqlfiles import load_migrations
from perdure.backends.postgres import PostgresBackend
from perdure.backends.postgres._conn import QUERIES
from perdure.codec import FernetCodec
from perdure.errors import RunNotFound, SchemaVersionError, ValidationError
from perdure.flows.definition import FlowShape, StepShape
from perdure.ids import is_run_id, new_run_id
from perdure.records import (
    Claim,
    ClaimParams,
    Complete,
    Fail,
    NewRun,
    Notice,
    Park,
    StepWrite,
    Transition,
    WaitWrite,
)

pytestmark = pytest.mark.postgres

DSN = os.environ.get("PERDURE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
WAIT = 10.0

BackendFactory = Callable[..., Awaitable[PostgresBackend]]


async def _admin() -> psycopg.AsyncConnection[tuple[object, ...]]:
    try:
        return await psycopg.AsyncConnection.connect(DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable at {DSN}: {exc}")
        pytest.skip(f"PostgreSQL is not reachable at {DSN}: {exc}")


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A fresh, empty schema, dropped with everything in it afterwards."""
    name = "swt_" + secrets.token_hex(6)
    conn = await _admin()
    try:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        yield name
    finally:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        await conn.close()


@pytest.fixture
async def make_backend(schema: str) -> AsyncIterator[BackendFactory]:
    """Open (and later close) backends on the test's schema; migrated by default."""
    opened: list[PostgresBackend] = []

    async def make(*, migrate: bool = True, **kwargs: Any) -> PostgresBackend:
        backend = PostgresBackend(DSN, schema=schema, **kwargs)
        opened.append(backend)
        await backend.open()
        if migrate:
            await backend.migrate()
        return backend

    yield make
    for backend in opened:
        await backend.close()


@pytest.fixture
async def admin(schema: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    """A plain connection with search_path set to the test's schema."""
    conn = await psycopg.AsyncConnection.connect(
        DSN, autocommit=True, options=f"-c search_path={schema}"
    )
    yield conn
    await conn.close()


def _new(workflow: str = "wf", **kwargs: object) -> NewRun:
    return NewRun(id=new_run_id(), workflow=workflow, version=1, input_json="{}", **kwargs)  # type: ignore[arg-type]


async def _next_notice(queue: asyncio.Queue[Notice], predicate: Callable[[Notice], bool]) -> Notice:
    async def scan() -> Notice:
        while True:
            notice = await queue.get()
            if predicate(notice):
                return notice

    return await asyncio.wait_for(scan(), WAIT)


# --------------------------------------------------------------------------- notices


async def test_only_watched_runs_send_progress_notices(make_backend: BackendFactory) -> None:
    watcher = await make_backend()
    worker = await make_backend()
    progress: asyncio.Queue[Notice] = asyncio.Queue()
    await watcher.listen(progress.put_nowait, progress=True)
    quiet = (await worker.create_run(_new())).run.id
    loud = (await worker.create_run(_new())).run.id
    await watcher.watch_run(loud, "watcher-1", 60)
    claims = {c.run.id: c for c in await worker.claim_runs(ClaimParams("w1", (("wf", 1),), 2, 30))}
    step = StepWrite("a", "run", "completed", "1")
    for run_id in (quiet, loud):  # the fast path: a step row, no outcome
        [done] = await worker.apply([Transition(run_id, claims[run_id].lease_token, steps=(step,))])
        assert done.ok
    first = await _next_notice(progress, lambda n: n.kind == "progress")
    assert first == Notice("progress", loud)  # the unwatched run sent none before it
    await watcher.watch_run(loud, "watcher-1", None)  # stops watching
    later = StepWrite("b", "run", "completed", "2")
    await worker.apply([Transition(loud, claims[loud].lease_token, steps=(later,))])
    await worker.apply([Transition(quiet, claims[quiet].lease_token, steps=(later,))])
    await watcher.watch_run(quiet, "watcher-2", 60)
    wait = WaitWrite("w", "go", None, None)  # the general path (a wait) notifies too
    await worker.apply(
        [Transition(quiet, claims[quiet].lease_token, waits=(wait,), outcome=Park("event"))]
    )
    nxt = await _next_notice(progress, lambda n: n.kind == "progress")
    assert nxt == Notice("progress", quiet)


async def test_notices_reach_subscribers_of_another_instance(make_backend: BackendFactory) -> None:
    listener = await make_backend()
    producer = await make_backend()
    queue: asyncio.Queue[Notice] = asyncio.Queue()
    unsubscribe = await listener.listen(queue.put_nowait)

    created = await producer.create_run(_new())
    run_id = created.run.id
    await _next_notice(queue, lambda n: n == Notice("wake", run_id))

    [claim] = await producer.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
    [result] = await producer.apply([Transition(run_id, claim.lease_token, outcome=Complete("1"))])
    assert result.ok
    done = await _next_notice(queue, lambda n: n.kind == "done")
    assert done == Notice("done", run_id, "completed", 1, "1")  # how it ended: no read

    other = await producer.create_run(_new())
    assert await producer.cancel_run(other.run.id)
    await _next_notice(queue, lambda n: n == Notice("cancel", other.run.id))
    cancelled = await _next_notice(queue, lambda n: n.kind == "done")
    assert cancelled == Notice("done", other.run.id, "cancelled", 1, None)

    await unsubscribe()
    second: asyncio.Queue[Notice] = asyncio.Queue()
    await listener.listen(second.put_nowait)
    last = await producer.create_run(_new())
    await _next_notice(second, lambda n: n == Notice("wake", last.run.id))
    assert all(queue.get_nowait().run_id != last.run.id for _ in range(queue.qsize()))


async def test_end_notices_say_how_the_run_ended_whatever_its_id(
    make_backend: BackendFactory,
) -> None:
    """A run's end notice carries its status, attempt and output or error, so that a
    waiter returns without reading the run; an id may hold any character (':' too),
    and an output too large for a notice is left for the read."""
    listener = await make_backend()
    producer = await make_backend()
    queue: asyncio.Queue[Notice] = asyncio.Queue()
    await listener.listen(queue.put_nowait)
    odd = "order:42:ü 😀"
    large = '"' + "x" * 8000 + '"'
    ends: dict[str, Complete | Fail] = {
        odd: Complete('{"total": 3}'),
        "failing:1": Fail({"type": "ValueError", "message": "no"}),
        "large": Complete(large),
    }
    for run_id, outcome in ends.items():
        await producer.create_run(NewRun(run_id, "wf", 1, "{}"))
        [claim] = await producer.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
        assert claim.run.id == run_id
        [done] = await producer.apply([Transition(run_id, claim.lease_token, outcome=outcome)])
        assert done.ok
    seen: dict[str | None, Notice] = {}
    while len(seen) < len(ends):
        notice = await _next_notice(queue, lambda n: n.kind == "done")
        seen[notice.run_id] = notice
    assert seen[odd] == Notice("done", odd, "completed", 1, '{"total": 3}')
    failed = seen["failing:1"]
    assert (failed.status, failed.attempt) == ("failed", 1)
    assert failed.outcome_json is not None
    assert json.loads(failed.outcome_json) == {"type": "ValueError", "message": "no"}
    assert seen["large"] == Notice("done", "large", "completed", 1, None)


async def test_with_a_codec_an_end_notice_leaves_the_output_to_the_read(
    make_backend: BackendFactory,
) -> None:
    """The notice holds the output as stored, sealed: the codec wrapper drops it, so a
    waiter reads the run through the wrapper and gets it opened."""
    sealed = CodecBackend(await make_backend(), FernetCodec(FernetCodec.generate_key()))
    queue: asyncio.Queue[Notice] = asyncio.Queue()
    await sealed.listen(queue.put_nowait)
    created = await sealed.create_run(_new())
    [claim] = await sealed.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
    [done] = await sealed.apply(
        [Transition(created.run.id, claim.lease_token, outcome=Complete('"secret"'))]
    )
    assert done.ok
    notice = await _next_notice(queue, lambda n: n.kind == "done")
    assert notice == Notice("done", created.run.id, "completed", 1, None)
    run = await sealed.get_run(created.run.id)
    assert run is not None and run.output == "secret"


async def test_a_subscriber_that_needs_no_ends_hears_none(make_backend: BackendFactory) -> None:
    """A worker without limits subscribes with ends=False: its connection does not
    LISTEN to runs' ends, so its process is not woken by every run's end."""
    listener = await make_backend()
    producer = await make_backend()
    queue: asyncio.Queue[Notice] = asyncio.Queue()
    await listener.listen(queue.put_nowait, ends=False)
    first = await producer.create_run(_new())
    [claim] = await producer.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
    [done] = await producer.apply(
        [Transition(first.run.id, claim.lease_token, outcome=Complete("1"))]
    )
    assert done.ok
    later = await producer.create_run(_new())
    # Notices arrive in commit order: had the end been sent to this connection, it
    # would have arrived before the later run's wake.
    await _next_notice(queue, lambda n: n == Notice("wake", later.run.id))
    kinds = [queue.get_nowait().kind for _ in range(queue.qsize())]
    assert "done" not in kinds


async def test_processes_of_earlier_versions_still_hear_runs_end(
    make_backend: BackendFactory, schema: str
) -> None:
    """During a rolling upgrade, the processes of the earlier version listen on
    '<schema>.done' for 'd:<run id>': an end still sends it."""
    producer = await make_backend()
    old = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
    try:
        await old.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"{schema}.done")))
        created = await producer.create_run(_new())
        [claim] = await producer.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
        [done] = await producer.apply(
            [Transition(created.run.id, claim.lease_token, outcome=Complete("1"))]
        )
        assert done.ok
        payloads = [item.payload async for item in old.notifies(timeout=WAIT, stop_after=1)]
        assert payloads == [f"d:{created.run.id}"]
    finally:
        await old.close()


async def test_listener_reconnects_after_its_connection_is_killed(
    make_backend: BackendFactory, schema: str
) -> None:
    listener = await make_backend()
    producer = await make_backend()
    queue: asyncio.Queue[Notice] = asyncio.Queue()
    await listener.listen(queue.put_nowait)
    await _kill_the_listener(schema)
    # After re-LISTENing, subscribers get a bare wake so they re-poll.
    await _next_notice(queue, lambda n: n == Notice("wake", None))
    created = await producer.create_run(_new())
    await _next_notice(queue, lambda n: n == Notice("wake", created.run.id))


async def test_result_waiters_look_again_when_the_listener_reconnects(
    make_backend: BackendFactory, schema: str
) -> None:
    """An end notice sent while the listener was down is lost: the bare wake of its
    reconnect wakes every result waiter, so none waits out its backing-off poll."""
    backend = await make_backend()
    woken = asyncio.Event()
    stop = await waiting_for_end(backend, new_run_id(), lambda _: woken.set())
    try:
        await _kill_the_listener(schema)
        await asyncio.wait_for(woken.wait(), 10)
    finally:
        await stop()


async def _kill_the_listener(schema: str) -> None:
    """Terminate the one connection LISTENing on the schema's channels."""
    admin = await _admin()
    try:
        cur = await admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE %s",
            (f'%LISTEN "{schema}.%',),
        )
        pids = [row[0] for row in await cur.fetchall()]
        assert len(pids) == 1, pids
        await admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
    finally:
        await admin.close()


# --------------------------------------------------------------------------- claims


async def test_claim_query_uses_the_claim_index(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    await make_backend()
    # A realistic table: 20k runs, most of them ended, a backlog of due and future
    # work across several workflows.
    await admin.execute(
        """
        INSERT INTO runs (id, workflow, version, status, input, available_at, completed_at)
        SELECT lpad(i::text, 26, '0'), 'wf' || (i % 5), 1,
               CASE WHEN i % 10 = 0 THEN 'pending' WHEN i % 10 = 1 THEN 'waiting'
                    ELSE 'completed' END,
               '{}', now() + (i - 10000) * interval '1 second',
               CASE WHEN i % 10 > 1 THEN now() END
        FROM generate_series(1, 20000) AS i
        """
    )
    await admin.execute("ANALYZE runs")
    params = {
        "workflows": ["wf0", "wf1"],
        "versions": [1, 1],
        "worker": "w1",
        "limit": 10,
        "lease": 30.0,
        "keyed": True,  # with its look for runs with a lane (one claim in eight)
    }
    cur = await admin.execute(b"EXPLAIN " + QUERIES["claim_runs"].encode(), params)
    plan = "\n".join(str(row[0]) for row in await cur.fetchall())
    assert "runs_claim_idx" in plan, plan
    assert "Seq Scan on runs" not in plan, plan
    cur = await admin.execute("SHOW enable_seqscan")
    assert (await cur.fetchone()) == ("on",)


async def test_claim_is_one_statement_with_journal_and_waits(
    make_backend: BackendFactory,
) -> None:
    backend = await make_backend()
    run_id = (await backend.create_run(_new())).run.id
    [claim] = await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 5, 30))
    step = StepWrite("a", "run", "completed", '{"x": [1, 2.5, "é"]}')
    park = Transition(
        run_id,
        claim.lease_token,
        steps=(step,),
        waits=(WaitWrite("w", "go", '{"k": 1}'),),
        outcome=Park("event"),
    )
    assert (await backend.apply([park]))[0].ok
    assert await backend.deliver_signal(run_id, "go", '{"k": 1, "extra": true}') == "resolved"
    [claim] = await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 5, 30))
    assert [s.name for s in claim.journal] == ["a", "w"]
    assert claim.journal[0].output == {"x": [1, 2.5, "é"]}
    assert claim.journal[1].output == {"k": 1, "extra": True}
    assert claim.journal[1].completed_at is not None
    assert claim.journal[1].completed_at.tzinfo is not None
    assert claim.waits == ()
    assert claim.lease_token != 0


async def test_claim_and_apply_batch_take_one_round_trip_each(
    make_backend: BackendFactory, tmp_path: Path
) -> None:
    """Counted on the wire (libpq trace): one Sync per claim and per apply batch,
    whatever the batch size; the batch is still one transaction."""
    backend = await make_backend(min_size=1, max_size=1)
    for _ in range(5):
        await backend.create_run(_new())

    async def traced(action: Callable[[], Awaitable[object]]) -> list[str]:
        path = tmp_path / "trace.txt"
        with path.open("w") as out:
            async with backend._db.connection() as conn:
                conn.pgconn.trace(out.fileno())
            await action()
            async with backend._db.connection() as conn:
                conn.pgconn.untrace()
        messages = []
        for line in path.read_text().splitlines():
            fields = line.split("\t")
            if "F" in fields[:2]:
                index = fields.index("F")
                messages.append(fields[index + 2])
        return messages

    claims: list[Claim] = []

    async def claim() -> None:
        claims.extend(await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 5, 30)))

    sent = await traced(claim)
    assert sent.count("Sync") == 1, sent
    assert len(claims) == 5

    now = await backend.now()
    batch = [
        Transition(c.run.id, c.lease_token, steps=(StepWrite("a", "run", "completed", "1"),))
        for c in claims[:2]
    ]
    batch += [Transition(claims[2].run.id, claims[2].lease_token, outcome=Complete("2"))]
    batch += [Transition(claims[3].run.id, claims[3].lease_token, outcome=Park("sleep", now))]
    batch += [Transition(claims[4].run.id, claims[4].lease_token + 1, outcome=Complete("3"))]
    results: list[bool] = []

    async def apply() -> None:
        results.extend(r.ok for r in await backend.apply(batch))

    sent = await traced(apply)
    assert sent.count("Sync") == 1, sent
    assert results == [True, True, True, True, False]


# --------------------------------------------------------------------------- migrations


async def test_concurrent_migrate_applies_once(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    backends = [await make_backend(migrate=False, min_size=1, max_size=1) for _ in range(8)]
    versions = await asyncio.gather(*(b.migrate() for b in backends))
    known = [m.version for m in load_migrations("perdure.backends.postgres")]
    latest = known[-1]
    assert versions == [latest] * 8
    cur = await admin.execute("SELECT version FROM schema_version ORDER BY 1")
    assert await cur.fetchall() == [(v,) for v in known]
    assert await backends[0].migrate() == latest


async def test_newer_schema_version_is_refused(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    await make_backend()
    await admin.execute("INSERT INTO schema_version (version) VALUES (999)")
    backend = await make_backend(migrate=False)
    with pytest.raises(SchemaVersionError, match="999 is newer than this perdure"):
        await backend.migrate()


# --------------------------------------------------------------------------- producers


async def test_concurrent_creates_with_one_key_make_one_run(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    backend = await make_backend(min_size=20, max_size=20)
    news = [_new(idempotency_key="order-42") for _ in range(20)]
    results = await asyncio.gather(*(backend.create_run(n) for n in news))
    assert sum(r.created for r in results) == 1
    assert len({r.run.id for r in results}) == 1
    cur = await admin.execute("SELECT count(*) FROM runs")
    assert await cur.fetchone() == (1,)
    cur = await admin.execute("SELECT count(*) FROM events WHERE type = 'created'")
    assert await cur.fetchone() == (1,)
    again = await backend.create_run(
        NewRun(new_run_id(), "wf", 1, '{"other": 1}', idempotency_key="order-42")
    )
    assert again.run.id == results[0].run.id and not again.created


async def test_concurrent_flow_starts_commit_together(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    """Flow starts made while another is committing share the next transaction, as
    workflow starts do (group commit): here all ten, submitted at once."""
    backend = await make_backend()
    await backend.register_flows(
        [FlowShape("pair", steps=(StepShape("a"), StepShape("b", ("a",))))]
    )
    news = [NewRun(new_run_id(), "pair", None, json.dumps(n)) for n in range(10)]
    results = await asyncio.gather(*(backend.start_flow(n) for n in news))
    assert [r.run.input for r in results] == list(range(10)) and all(r.created for r in results)
    cur = await admin.execute(
        "SELECT count(DISTINCT xmin::text) FROM events WHERE type = 'created' AND run_id = ANY(%s)",
        ([n.id for n in news],),
    )
    assert await cur.fetchone() == (1,)


async def test_sql_producers_work_from_another_search_path(
    make_backend: BackendFactory, schema: str
) -> None:
    backend = await make_backend()
    conn = await _admin()  # search_path is the default ("$user", public)
    try:
        ident = sql.Identifier(schema)
        cur = await conn.execute(sql.SQL("SELECT {}.new_run_id()").format(ident))
        row = await cur.fetchone()
        assert row is not None
        assert is_run_id(row[0])
        cur = await conn.execute(
            sql.SQL(
                "SELECT (c.run).id, c.created FROM {}.create_run({}.new_run_id(), %s, 1, %s) c"
            ).format(ident, ident),
            ("billing", '{"n": 1}'),
        )
        row = await cur.fetchone()
        assert row is not None
        assert row[1] is True
        run = await backend.get_run(str(row[0]))
        assert run is not None
        assert run.workflow == "billing"
        assert run.input == {"n": 1}
        with pytest.raises(psycopg.Error) as info:
            await conn.execute(
                sql.SQL("SELECT {}.create_run({}.new_run_id(), %s, 1, 'null')").format(
                    ident, ident
                ),
                ("bad name!",),
            )
        assert info.value.sqlstate == "PD001"
        cur = await conn.execute(
            sql.SQL("SELECT {}.signal_run(%s, 'go', '1')").format(ident), (run.id,)
        )
        assert await cur.fetchone() == (True,)
    finally:
        await conn.close()
    with pytest.raises(ValidationError, match="invalid workflow name"):
        await backend.create_run(NewRun(new_run_id(), "bad name!", 1, "null"))
    with pytest.raises(RunNotFound):
        await backend.deliver_signal(new_run_id(), "go", "1")


# --------------------------------------------------------------------------- apply


async def test_apply_fast_and_general_paths_agree_on_child_completion(
    make_backend: BackendFactory,
) -> None:
    """A child's Complete through the one-statement path and a Fail through the
    plpgsql path both write the parent's journal row and wake the parent."""
    backend = await make_backend()
    parent_id = (await backend.create_run(_new("parent"))).run.id
    [claim] = await backend.claim_runs(ClaimParams("w1", (("parent", 1),), 1, 30))
    kids = (
        NewRun(new_run_id(), "kid", 1, "1", parent_id=parent_id, parent_step="a"),
        NewRun(new_run_id(), "kid", 1, "2", parent_id=parent_id, parent_step="b"),
    )
    park = Transition(parent_id, claim.lease_token, children=kids, outcome=Park("child"))
    assert (await backend.apply([park]))[0].ok
    parent = await backend.get_run(parent_id)
    assert parent is not None
    assert parent.status == "waiting"
    assert parent.wake_at is None

    claims = await backend.claim_runs(ClaimParams("w2", (("kid", 1),), 5, 30))
    by_input = {c.run.input: c for c in claims}
    first, second = by_input[1], by_input[2]
    done = Transition(first.run.id, first.lease_token, outcome=Complete('{"v":  1}'))
    # A wait in the transition sends the second child through the plpgsql path.
    failed = Transition(
        second.run.id,
        second.lease_token,
        waits=(WaitWrite("unused", "never"),),
        outcome=Fail({"type": "Boom", "message": "no"}),
    )
    results = await backend.apply([done, failed])
    assert [r.ok for r in results] == [True, True]
    steps = {s.name: s for s in await backend.get_steps(parent_id)}
    assert steps["a"].status == "completed"
    assert steps["a"].output == {"v": 1}
    assert steps["b"].status == "failed"
    assert steps["b"].error == {"type": "Boom", "message": "no", "run_id": second.run.id}
    parent = await backend.get_run(parent_id)
    assert parent is not None
    assert parent.wake_at is not None
    assert parent.wake_at <= await backend.now()


async def test_stale_token_writes_nothing(make_backend: BackendFactory) -> None:
    backend = await make_backend()
    run_id = (await backend.create_run(_new())).run.id
    [old] = await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 0.001))
    deadline = asyncio.get_running_loop().time() + WAIT
    while not (taken := await backend.claim_runs(ClaimParams("w2", (("wf", 1),), 1, 30))):
        assert asyncio.get_running_loop().time() < deadline, "the 1 ms lease never expired"
        await asyncio.sleep(0.005)
    [new] = taken
    assert new.recovered
    assert new.lease_token != old.lease_token
    stale = Transition(
        run_id,
        old.lease_token,
        steps=(StepWrite("a", "run", "completed", "1"),),
        outcome=Park("sleep", wake_at=await backend.now() + timedelta(hours=1)),
    )
    fresh = Transition(run_id, new.lease_token, steps=(StepWrite("b", "run", "completed", "2"),))
    results = await backend.apply([stale, fresh])
    assert [r.ok for r in results] == [False, True]
    assert [s.name for s in await backend.get_steps(run_id)] == ["b"]
    run = await backend.get_run(run_id)
    assert run is not None
    assert run.status == "running"
    types = [e.type for e in await backend.get_events(run_id)]
    assert types == ["created", "claimed", "lease_expired", "claimed", "step_completed"]


# --------------------------------------------------------------------------- the clock seam


async def _shift_clock(admin: psycopg.AsyncConnection[tuple[object, ...]], hours: int) -> None:
    """What a test clock does: replace perdure_now() by pg_catalog.now() plus an offset."""
    await admin.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION perdure_now() RETURNS timestamptz "
            "LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT pg_catalog.now() + {} $$"
        ).format(sql.Literal(timedelta(hours=hours)))
    )


async def test_moving_the_clock_seam_moves_due_times_and_leases(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    backend = await make_backend()
    before = await backend.now()
    later = await backend.create_run(_new(delay=3600.0))
    held = await backend.create_run(_new())
    params = ClaimParams("w1", (("wf", 1),), 10, 30.0)
    claimed = await backend.claim_runs(params)
    assert [c.run.id for c in claimed] == [held.run.id]  # the delayed run is not due

    await _shift_clock(admin, 2)
    assert await backend.now() - before > timedelta(hours=1, minutes=59)
    again = await backend.claim_runs(ClaimParams("w2", (("wf", 1),), 10, 30.0))
    # the delayed run is due now, and the first worker's 30 s lease has expired
    assert {c.run.id for c in again} == {later.run.id, held.run.id}
    recovered = next(c for c in again if c.run.id == held.run.id)
    assert recovered.recovered


# --------------------------------------------------------------------------- upgrades


_CATALOG = """
SELECT 'column', c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %(schema)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relkind IN ('r', 'v')
UNION ALL
SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = %(schema)s::text
UNION ALL
SELECT 'constraint', conrelid::regclass::text || '.' || conname, pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = %(schema)s::regnamespace
UNION ALL
SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       md5(p.prosrc) || ' ' || coalesce(p.proconfig::text, '') || ' '
       || p.prosecdef::text || ' ' || p.provolatile::text || ' ' || coalesce(p.proacl::text, '')
FROM pg_proc p WHERE p.pronamespace = %(schema)s::regnamespace
ORDER BY 1, 2
"""


async def _catalog(
    admin: psycopg.AsyncConnection[tuple[object, ...]], schema: str
) -> list[tuple[str, str, str]]:
    cur = await admin.execute(_CATALOG, {"schema": schema})

    def plain(text: object) -> str:  # names are qualified when not on the search path
        return str(text).replace(f"{schema}.", "").replace(schema, "<schema>")

    return [(str(kind), plain(name), plain(text)) for kind, name, text in await cur.fetchall()]


async def test_an_upgraded_install_is_the_same_as_a_fresh_one(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    """The upgraded schema starts one migration behind, with the functions of an older
    perdure (stale digest and version, one function missing, one out of date)."""
    from perdure.backends.postgres._schema import migrate

    fresh = await make_backend()
    latest = await fresh.migrate()
    old = "swt_" + secrets.token_hex(6)
    upgraded = PostgresBackend(DSN, schema=old)
    await upgraded.open()
    try:
        await migrate(upgraded._db, old, up_to=latest - 1)
        await migrate(upgraded._db, old)
        stale = sql.SQL(
            "UPDATE {s}.functions_applied SET digest = 'old', perdure_version = '0.0.1';"
            "DROP FUNCTION {s}.check_event(text, jsonb);"
            "CREATE OR REPLACE FUNCTION {s}.like_pattern(p_pattern text) RETURNS text "
            "LANGUAGE sql IMMUTABLE AS $$ SELECT p_pattern $$"
        ).format(s=sql.Identifier(old))
        await admin.execute(stale)
        assert await upgraded.migrate() == latest
        assert await _catalog(admin, old) == await _catalog(admin, fresh.schema)
    finally:
        await upgraded.close()
        await admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(old)))


async def test_the_upgrade_takes_lease_tokens_out_of_the_claimed_events_stored_before(
    make_backend: BackendFactory, admin: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    backend = await make_backend()
    run_id = (await backend.create_run(_new())).run.id
    await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 1, 30))
    stored = json.dumps({"worker": "w0", "lease_token": 1795633750577})
    await admin.execute(
        "INSERT INTO events (run_id, type, data) VALUES (%s, 'claimed', %s::jsonb)",
        (run_id, stored),
    )
    (migration,) = [
        m
        for m in load_migrations("perdure.backends.postgres")
        if m.name.endswith("_claimed_without_token.sql")
    ]
    await admin.execute(migration.sql)
    claimed = [e.data for e in await backend.get_events(run_id) if e.type == "claimed"]
    assert sorted(claimed, key=str) == [{"worker": "w0"}, {"worker": "w1"}]
