"""SQLite-only tests of `SQLiteBackend`: the file, the locking, the SQL functions.

The backend-agnostic behaviour is covered by tests/contract/; these tests check what
only SQLite has: WAL and pragmas, integrity, claim exclusivity between connections and
processes, the json_contains function, migrations under BEGIN IMMEDIATE, the claim's
query plan, and the in-process notice hub.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import runpy
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from perdure.backends.sqlite import SQLiteBackend
from perdure.backends.sqlite._json import contains, json_contains, json_equal
from perdure.backends.sqlite._session import MIGRATIONS, QUERIES, split_statements
from perdure.backends.sqlite.backend import WAL_SIZE_LIMIT
from perdure.errors import (
    BackendError,
    ConfigurationError,
    RunNotFound,
    SchemaVersionError,
    ValidationError,
)
from perdure.ids import new_run_id
from perdure.records import (
    ClaimParams,
    Complete,
    EventWrite,
    Fail,
    ListRunsParams,
    NewRun,
    Notice,
    Park,
    Release,
    Retry,
    StepWrite,
    Transition,
    WaitWrite,
    WorkerInfo,
    WorkflowRecord,
)

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "perdure" / "backends" / "sqlite"
PAIRS = (("wf", 1), ("child", 1))
T0 = 1_700_000_000.0


class FakeClock:
    """A settable database clock (Unix seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "perdure.db"


@pytest.fixture
async def backend(db_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteBackend]:
    b = SQLiteBackend(db_path, clock=clock)
    await b.open()
    await b.migrate()
    yield b
    await b.close()


def new_run(workflow: str = "wf", input_json: str = "{}", **kw: Any) -> NewRun:
    return NewRun(id=new_run_id(), workflow=workflow, version=1, input_json=input_json, **kw)


async def claim_one(b: SQLiteBackend, worker: str = "w1", lease: float = 30.0) -> Any:
    claims = await b.claim_runs(ClaimParams(worker, PAIRS, 1, lease))
    assert len(claims) == 1, claims
    return claims[0]


def size_of(path: Path) -> int:
    return path.stat().st_size


def raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


# --------------------------------------------------------------------------- file & pragmas


async def test_wal_and_pragmas(backend: SQLiteBackend, db_path: Path) -> None:
    conn = raw(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()

    def pragmas(s: Any) -> tuple[int, int, int]:
        c = s.conn
        return (
            c.execute("PRAGMA synchronous").fetchone()[0],
            c.execute("PRAGMA foreign_keys").fetchone()[0],
            c.execute("PRAGMA busy_timeout").fetchone()[0],
        )

    assert await backend._call(pragmas) == (1, 1, 30_000)  # NORMAL, on, 30 s


async def test_the_wal_shrinks_back_after_a_long_reader(
    backend: SQLiteBackend, db_path: Path
) -> None:
    # A reader holding its snapshot keeps SQLite from checkpointing past it, so the
    # WAL grows meanwhile; once it is gone, the next checkpoints bring the file back
    # under the limit instead of leaving it at the size it reached.
    wal = Path(f"{db_path}-wal")
    big = json.dumps("x" * 400_000)
    reader = raw(db_path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchall()
    for _ in range(60):
        await backend.create_run(new_run(input_json=big))
    grown = size_of(wal)
    assert grown > WAL_SIZE_LIMIT  # held back by the reader
    reader.execute("COMMIT")
    reader.close()
    for _ in range(30):  # past an automatic checkpoint (1,000 pages), then a restart
        await backend.create_run(new_run(input_json=big))
    assert size_of(wal) <= WAL_SIZE_LIMIT


async def test_the_file_and_its_wal_and_shm_are_private(tmp_path: Path) -> None:
    path = tmp_path / "private.db"
    b = SQLiteBackend(path)
    await b.open()
    try:
        await b.migrate()
        await b.create_run(NewRun(id=new_run_id(), workflow="wf", version=1, input_json="1"))
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: f.stat().st_mode & 0o777 for f in files} == {f.name: 0o600 for f in files}
    finally:
        await b.close()


@pytest.mark.parametrize(
    "url", ["sqlite:///x.db?mode=ro", "sqlite:///x.db#part", "sqlite:///x.db?"]
)
def test_an_sqlite_url_with_a_query_or_fragment_is_refused(url: str) -> None:
    from perdure.backends import create_backend

    with pytest.raises(ConfigurationError, match="query or fragment"):
        create_backend(url)


async def test_synchronous_full(db_path: Path) -> None:
    b = SQLiteBackend(db_path, synchronous="full")
    try:
        await b.open()
        assert await b._call(lambda s: s.conn.execute("PRAGMA synchronous").fetchone()[0]) == 2
    finally:
        await b.close()


@pytest.mark.parametrize(
    "kwargs", [{"synchronous": "SOMETIMES"}, {"busy_timeout_ms": -1}, {"busy_timeout_ms": 1.5}]
)
def test_bad_settings(db_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteBackend(db_path, **kwargs)


async def test_integrity_after_work(backend: SQLiteBackend, db_path: Path) -> None:
    await backend.register_workflows([WorkflowRecord("wf", 1)])
    for _ in range(20):
        await backend.create_run(new_run())
    for claim in await backend.claim_runs(ClaimParams("w", PAIRS, 20, 30)):
        step = StepWrite("s", "run", "completed", "1")
        await backend.apply([Transition(claim.run.id, claim.lease_token, steps=(step,))])
        await backend.apply([Transition(claim.run.id, claim.lease_token, outcome=Complete("2"))])
    assert await backend.sweep(0) == 20
    conn = raw(db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        for table in ("runs", "steps", "events", "waits", "signals"):
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
    finally:
        conn.close()


async def test_closed_backend_rejects_calls(db_path: Path) -> None:
    b = SQLiteBackend(db_path)
    await b.open()
    await b.migrate()
    await b.close()
    await b.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        await b.get_run("x")


async def test_busy_becomes_backend_error(db_path: Path) -> None:
    setup = SQLiteBackend(db_path)
    await setup.open()
    await setup.migrate()
    await setup.close()
    b = SQLiteBackend(db_path, busy_timeout_ms=20)
    await b.open()
    holder = raw(db_path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendError) as info:
            await b.create_run(new_run())
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # Once the lock is gone the same backend works again.
    assert (await b.create_run(new_run())).created
    await b.close()


# --------------------------------------------------------------------------- claims


async def test_claim_uses_partial_index(backend: SQLiteBackend) -> None:
    def plan(s: Any) -> str:
        rows = s.conn.execute(
            "EXPLAIN QUERY PLAN " + QUERIES["claim_select"],
            {"now": 0.0, "pairs": "[]", "limit": 1},
        ).fetchall()
        return "\n".join(str(row["detail"]) for row in rows)

    text = await backend._call(plan)
    assert "runs_claim_idx" in text
    assert "TEMP B-TREE" not in text  # the index gives the claim order


async def test_claim_order_and_pairs(backend: SQLiteBackend, clock: FakeClock) -> None:
    late = await backend.create_run(new_run(priority=100))
    clock.advance(1)
    urgent = await backend.create_run(new_run(priority=1))
    other_version = await backend.create_run(
        NewRun(new_run_id(), "wf", 2, "{}")  # not in the pairs
    )
    clock.advance(1)
    claims = await backend.claim_runs(ClaimParams("w", PAIRS, 10, 30))
    assert [c.run.id for c in claims] == [urgent.run.id, late.run.id]
    assert (await backend.get_run(other_version.run.id)).status == "pending"  # type: ignore[union-attr]


async def test_two_connections_never_double_claim(db_path: Path) -> None:
    first = SQLiteBackend(db_path)
    second = SQLiteBackend(db_path)
    await first.open()
    await first.migrate()
    await second.open()
    ids = {(await first.create_run(new_run())).run.id for _ in range(200)}
    claimed: list[str] = []

    def drain(b: SQLiteBackend, worker: str) -> None:
        async def go() -> None:
            while True:
                got = await b.claim_runs(ClaimParams(worker, PAIRS, 3, 300))
                if not got:
                    return
                claimed.extend(c.run.id for c in got)

        asyncio.run(go())

    threads = [
        threading.Thread(target=drain, args=(b, f"w{i}"))
        for i, b in enumerate([first, second, first, second])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == len(set(claimed)) == 200
    assert set(claimed) == ids
    await first.close()
    await second.close()


_CLAIMER = """
import asyncio, json, sys
from perdure.backends.sqlite import SQLiteBackend
from perdure.records import ClaimParams

async def main():
    b = SQLiteBackend(sys.argv[1])
    await b.open()
    got = []
    empty = 0
    while empty < 3:
        claims = await b.claim_runs(ClaimParams(sys.argv[2], (("wf", 1),), 4, 300))
        empty = 0 if claims else empty + 1
        got.extend(c.run.id for c in claims)
        await asyncio.sleep(0)
    await b.close()
    print(json.dumps(got))

asyncio.run(main())
"""


@pytest.mark.slow
def test_processes_never_double_claim(db_path: Path, tmp_path: Path) -> None:
    async def setup() -> set[str]:
        b = SQLiteBackend(db_path)
        await b.migrate()
        ids = {(await b.create_run(new_run())).run.id for _ in range(300)}
        await b.close()
        return ids

    ids = asyncio.run(setup())
    script = tmp_path / "claimer.py"
    script.write_text(_CLAIMER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(db_path), f"p{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    claimed: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        claimed.extend(json.loads(out))
    assert len(claimed) == len(set(claimed)) == 300
    assert set(claimed) == ids


async def test_lease_expiry_and_fencing(backend: SQLiteBackend, clock: FakeClock) -> None:
    created = await backend.create_run(new_run())
    first = await claim_one(backend, "w1", lease=10)
    assert first.lease_token != 0
    assert not first.recovered
    assert await backend.claim_runs(ClaimParams("w2", PAIRS, 5, 10)) == []
    assert await backend.extend_leases("w1", [(created.run.id, first.lease_token)], 10) == {
        created.run.id
    }
    clock.advance(11)
    second = await claim_one(backend, "w2", lease=10)
    assert second.recovered
    assert second.lease_token != first.lease_token
    assert second.claims_since_progress == 2
    stale = await backend.apply([Transition(created.run.id, 1, outcome=Complete("1"))])
    assert [r.ok for r in stale] == [False]
    assert await backend.extend_leases("w1", [(created.run.id, 1)], 10) == set()
    types = [e.type for e in await backend.get_events(created.run.id)]
    assert types == ["created", "claimed", "lease_expired", "claimed"]


async def test_next_wake_at(backend: SQLiteBackend, clock: FakeClock) -> None:
    assert await backend.next_wake_at(PAIRS) is None
    await backend.create_run(new_run(delay=60))
    expected = datetime.fromtimestamp(T0 + 60, UTC)
    assert await backend.next_wake_at(PAIRS) == expected
    assert await backend.next_wake_at([("other", 1)]) is None


# --------------------------------------------------------------------------- apply


async def test_apply_batch_isolates_failed_fences(backend: SQLiteBackend) -> None:
    a = (await backend.create_run(new_run())).run.id
    b = (await backend.create_run(new_run())).run.id
    claims = {c.run.id: c for c in await backend.claim_runs(ClaimParams("w", PAIRS, 2, 30))}
    step = StepWrite("s", "run", "completed", '"x"')
    results = await backend.apply(
        [
            Transition(a, claims[a].lease_token, steps=(step,), step_attempts=1),
            Transition(b, claims[b].lease_token + 5, steps=(step,), step_attempts=1),
        ]
    )
    assert [r.ok for r in results] == [True, False]
    assert [s.name for s in await backend.get_steps(a)] == ["s"]
    assert await backend.get_steps(b) == []


async def test_journal_rows_are_final_and_retrying_is_replaced(backend: SQLiteBackend) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    t = c.lease_token
    retry = StepWrite("s", "run", "retrying", error={"type": "E", "message": "m"})
    assert (await backend.apply([Transition(run_id, t, steps=(retry,))]))[0].existing == ()
    done = StepWrite("s", "run", "completed", '"first"', attempts=2)
    assert (await backend.apply([Transition(run_id, t, steps=(done,))]))[0].existing == ()
    late = StepWrite("s", "run", "completed", '"second"')
    [result] = await backend.apply([Transition(run_id, t, steps=(late,))])
    assert result.ok
    assert [(s.name, s.output, s.attempts) for s in result.existing] == [("s", "first", 2)]
    [step] = await backend.get_steps(run_id)
    assert step.status == "completed"
    assert step.output == "first"


async def test_an_sqlite_error_rolls_back_only_its_transition(
    backend: SQLiteBackend, caplog: pytest.LogCaptureFixture
) -> None:
    good = (await backend.create_run(new_run())).run.id
    bad = (await backend.create_run(new_run())).run.id
    await backend.deliver_signal(bad, "go", "{}")
    claims = {c.run.id: c for c in await backend.claim_runs(ClaimParams("w", PAIRS, 2, 30))}
    # A match that is not JSON makes json_contains fail half way through the park.
    broken = WaitWrite("w", "go", "{not json")
    step = StepWrite("s", "run", "completed", "1")
    results = await backend.apply(
        [
            Transition(
                bad,
                claims[bad].lease_token,
                steps=(step,),
                waits=(broken,),
                step_attempts=1,
                outcome=Park("event"),
            ),
            Transition(good, claims[good].lease_token, steps=(step,), step_attempts=1),
        ]
    )
    assert [r.ok for r in results] == [False, True]
    assert "rejected by SQLite" in caplog.text
    assert await backend.get_steps(bad) == []
    run = await backend.get_run(bad)
    assert run is not None
    assert run.status == "running"
    assert [s.name for s in await backend.get_steps(good)] == ["s"]


async def test_concurrent_creates_with_one_key(db_path: Path) -> None:
    first = SQLiteBackend(db_path)
    await first.migrate()
    second = SQLiteBackend(db_path)
    results: list[bool] = []

    def create(b: SQLiteBackend) -> None:
        async def go() -> None:
            for i in range(20):
                new = new_run(input_json=json.dumps(i), idempotency_key=f"k{i}")
                results.append((await b.create_run(new)).created)

        asyncio.run(go())

    threads = [threading.Thread(target=create, args=(b,)) for b in (first, second) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 60 + [True] * 20
    await first.close()
    await second.close()


async def test_apply_rejects_unknown_values(backend: SQLiteBackend) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    bad = StepWrite("s", "run", "exploded")
    with pytest.raises(ValidationError):
        await backend.apply([Transition(run_id, c.lease_token, steps=(bad,))])
    assert await backend.get_steps(run_id) == []


async def test_park_times(backend: SQLiteBackend, clock: FakeClock) -> None:
    run_id = (await backend.create_run(new_run(deadline_in=500))).run.id
    c = await claim_one(backend)
    wait = WaitWrite("w", "go", None, timeout_at=datetime.fromtimestamp(T0 + 100, UTC))
    park = Park("sleep", wake_at=datetime.fromtimestamp(T0 + 200, UTC))
    await backend.apply([Transition(run_id, c.lease_token, waits=(wait,), outcome=park)])
    run = await backend.get_run(run_id)
    assert run is not None
    assert run.status == "waiting"
    assert run.wake_reason == "sleep"
    assert run.wake_at == datetime.fromtimestamp(T0 + 100, UTC)
    clock.advance(100)
    c = await claim_one(backend)
    assert [w.key for w in c.waits] == ["w"]
    # The kept wait's timeout (now past) still counts; without it the deadline does.
    await backend.apply([Transition(c.run.id, c.lease_token, outcome=Park("event"))])
    again = await backend.get_run(run_id)
    assert again is not None
    assert again.wake_at == datetime.fromtimestamp(T0 + 100, UTC)
    c = await claim_one(backend)
    done = StepWrite("w", "wait", "completed", "null")
    await backend.apply([Transition(run_id, c.lease_token, steps=(done,), outcome=Park("event"))])
    again = await backend.get_run(run_id)
    assert again is not None
    assert again.wake_at == run.deadline_at


async def test_park_consumes_oldest_buffered_signal(backend: SQLiteBackend) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    assert await backend.deliver_signal(run_id, "go", '{"n":1}') == "buffered"
    assert await backend.deliver_signal(run_id, "go", '{"n":2}') == "buffered"
    c = await claim_one(backend)
    waits = (WaitWrite("a", "go", '{"n":2}'), WaitWrite("b", "go", None))
    notices: list[Notice] = []
    unsubscribe = await backend.listen(notices.append)
    await backend.apply([Transition(run_id, c.lease_token, waits=waits, outcome=Park("event"))])
    run = await backend.get_run(run_id)
    assert run is not None
    assert run.status == "waiting"
    assert run.wake_at is not None
    outputs = {s.name: s.output for s in await backend.get_steps(run_id)}
    assert outputs == {"a": {"n": 2}, "b": {"n": 1}}
    types = [e.type for e in await backend.get_events(run_id)]
    assert types[2:] == ["waiting", "step_completed", "signaled", "step_completed", "signaled"]
    c = await claim_one(backend)
    assert c.waits == ()
    await _until(lambda: Notice("wake", run_id) in notices)
    await unsubscribe()


async def test_retry_and_release(backend: SQLiteBackend, clock: FakeClock) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    wake = datetime.fromtimestamp(T0 + 30, UTC)
    error = {"type": "Boom", "message": "no"}
    await backend.apply([Transition(run_id, c.lease_token, outcome=Retry(wake, error))])
    run = await backend.get_run(run_id)
    assert run is not None
    assert (run.status, run.attempt, run.error, run.wake_at, run.wake_reason) == (
        "waiting",
        2,
        error,
        wake,
        "retry",
    )
    clock.advance(30)
    c = await claim_one(backend)
    await backend.apply([Transition(run_id, c.lease_token, outcome=Release())])
    run = await backend.get_run(run_id)
    assert run is not None
    assert run.status == "waiting"
    assert run.wake_reason is None
    assert (await claim_one(backend)).lease_token != c.lease_token


async def test_child_failure_reaches_parent(backend: SQLiteBackend) -> None:
    parent = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    child = new_run("child", '{"x":1}', parent_id=parent, parent_step="kid")
    await backend.apply(
        [Transition(parent, c.lease_token, children=(child,), outcome=Park("child"))]
    )
    cc = await claim_one(backend)
    assert cc.run.id == child.id
    assert cc.run.parent_id == parent
    err = {"type": "Boom", "message": "bad"}
    await backend.apply([Transition(child.id, cc.lease_token, outcome=Fail(err))])
    pc = await claim_one(backend)
    assert pc.run.id == parent
    [row] = pc.journal
    assert (row.name, row.kind, row.status) == ("kid", "child", "failed")
    assert row.error == {**err, "run_id": child.id}


async def test_cancel_cascades_and_fails_parent_step(backend: SQLiteBackend) -> None:
    parent = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    child = new_run("child", parent_id=parent, parent_step="kid")
    await backend.apply(
        [Transition(parent, c.lease_token, children=(child,), outcome=Park("child"))]
    )
    cc = await claim_one(backend)
    grandchild = new_run("child", parent_id=child.id, parent_step="g")
    await backend.apply(
        [Transition(child.id, cc.lease_token, children=(grandchild,), outcome=Park("child"))]
    )
    assert await backend.deliver_signal(grandchild.id, "x", "1") == "buffered"
    assert await backend.cancel_run(child.id) is True
    assert await backend.cancel_run(child.id) is False
    for run_id in (child.id, grandchild.id):
        run = await backend.get_run(run_id)
        assert run is not None
        assert run.status == "cancelled"
        assert run.completed_at is not None
    assert await backend.deliver_signal(grandchild.id, "x", "1") == "ended"
    pc = await claim_one(backend)
    [row] = pc.journal
    assert row.status == "failed"
    assert row.error is not None
    assert row.error["type"] == "WorkflowCancelled"
    assert row.error["run_id"] == child.id
    with pytest.raises(RunNotFound):
        await backend.cancel_run("nope")


# --------------------------------------------------------------------------- producers


async def test_idempotent_create(backend: SQLiteBackend) -> None:
    first = await backend.create_run(new_run(input_json='{"a":1,"b":[1,2]}', idempotency_key="k"))
    again = await backend.create_run(new_run(input_json='{"b":[1,2.0],"a":1}', idempotency_key="k"))
    assert first.created
    assert not again.created
    assert again.run.id == first.run.id
    differing = await backend.create_run(
        new_run(input_json='{"a":true,"b":[1,2]}', idempotency_key="k")
    )
    assert differing.run.id == first.run.id and not differing.created
    types = [e.type for e in await backend.get_events(first.run.id)]
    assert types == ["created", "duplicate_start"]  # the equal JSON above recorded nothing
    other = await backend.create_run(new_run("child", idempotency_key="k"))
    assert other.created


async def test_publish(backend: SQLiteBackend) -> None:
    await backend.register_workflows(
        [
            WorkflowRecord("wf", 1),
            WorkflowRecord("wf", 2, {"priority": 7, "retention_days": 3, "deadline_seconds": 60}),
        ]
    )
    assert await backend.subscribe_topic("orders.*", "wf") is True
    assert await backend.subscribe_topic("orders.*", "wf") is False
    assert await backend.subscribe_topic("orders.created", "wf") is True
    assert await backend.subscribe_topic("*", "ghost") is True  # no registry row: skipped
    waiter = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    wait = WaitWrite("w", "orders.eu.created", '{"id":5}')
    await backend.apply([Transition(waiter, c.lease_token, waits=(wait,), outcome=Park("event"))])
    result = await backend.publish("orders.eu.created", '{"id":5,"total":3}', "key-1")
    assert result.resumed == (waiter,)
    [started] = result.started
    run = await backend.get_run(started)
    assert run is not None
    assert (run.workflow, run.version, run.priority) == ("wf", 2, 7)
    assert run.retention_days == 3
    assert run.deadline_at is not None
    assert run.input == {"id": 5, "total": 3}
    assert await backend.publish("orders.eu.created", "{}", "key-1") == result
    assert (await backend.publish("orders.created", "{}")).started != ()
    assert (await backend.publish("invoices.created", "{}")).started == ()
    assert await backend.list_subscriptions() == [
        ("*", "ghost"),
        ("orders.*", "wf"),
        ("orders.created", "wf"),
    ]
    assert await backend.unsubscribe_topic("*", "ghost") is True
    assert await backend.unsubscribe_topic("*", "ghost") is False


# --------------------------------------------------------------------------- reads


async def test_list_runs_pages_and_filters(backend: SQLiteBackend, clock: FakeClock) -> None:
    ids = []
    for i in range(5):
        doc = json.dumps({"i": i, "tags": ["a", "b"] if i % 2 else ["c"]})
        new = NewRun(new_run_id(int(clock.now * 1000)), "wf", 1, doc)  # ids sort by time
        ids.append((await backend.create_run(new)).run.id)
        clock.advance(1)
    ids.reverse()  # newest first
    seen: list[str] = []
    cursor = None
    while True:
        page = await backend.list_runs(ListRunsParams(limit=2, cursor=cursor))
        seen.extend(r.id for r in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ids
    tagged = await backend.list_runs(ListRunsParams(input_match_json='{"tags":["b"]}'))
    assert [r.input["i"] for r in tagged.items] == [3, 1]
    window = ListRunsParams(
        workflow="wf",
        since=datetime.fromtimestamp(T0 + 1, UTC),
        until=datetime.fromtimestamp(T0 + 3, UTC),
    )
    assert [r.input["i"] for r in (await backend.list_runs(window)).items] == [2, 1]
    assert (await backend.list_runs(ListRunsParams(status="running"))).items == []


async def test_events_merge_in_write_order_with_a_frozen_clock(backend: SQLiteBackend) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    s1 = StepWrite("one", "run", "completed", "1")
    await backend.apply([Transition(run_id, c.lease_token, steps=(s1,))])
    s2 = StepWrite("two", "run", "completed", "2")
    ev = EventWrite("step_failed", {"step": "x"})
    await backend.apply([Transition(run_id, c.lease_token, steps=(s2,), events=(ev,))])
    await backend.apply([Transition(run_id, c.lease_token, outcome=Complete("3"))])
    events = await backend.get_events(run_id)
    assert [(e.type, e.data.get("step") if isinstance(e.data, dict) else None) for e in events] == [
        ("created", None),
        ("claimed", None),
        ("step_completed", "one"),
        ("step_completed", "two"),
        ("step_failed", "x"),
        ("completed", None),
    ]
    assert events[2].data == {"step": "one", "kind": "run"}


async def test_workflow_summaries(backend: SQLiteBackend) -> None:
    await backend.register_workflows([WorkflowRecord("idle", 1), WorkflowRecord("wf", 3)])
    await backend.create_run(new_run())
    summaries = {s.name: s.counts for s in await backend.workflow_summaries()}
    assert list(summaries) == ["idle", "wf"]
    assert summaries["idle"] == dict.fromkeys(
        ("pending", "running", "waiting", "completed", "failed", "cancelled"), 0
    )
    assert summaries["wf"]["pending"] == 1


async def test_workers(backend: SQLiteBackend, clock: FakeClock) -> None:
    at = datetime.fromtimestamp(T0, UTC)
    await backend.register_worker(WorkerInfo("w1", "host", 1, ("wf@1",), 4, at, at))
    clock.advance(5)
    await backend.register_worker(WorkerInfo("w2", "host", 2, ("wf@1",), 4, at, at))
    assert [w.id for w in await backend.list_workers(60)] == ["w2", "w1"]
    clock.advance(10)
    await backend.extend_leases("w1", [], 30)
    await backend.deregister_worker("w2")
    workers = await backend.list_workers(8)
    assert [(w.id, w.workflows, w.stopped_at is None) for w in workers] == [("w1", ("wf@1",), True)]


async def test_sweep_respects_retention(backend: SQLiteBackend, clock: FakeClock) -> None:
    keep = (await backend.create_run(new_run(retention_days=10))).run.id
    short = (await backend.create_run(new_run(retention_days=1))).run.id
    live = (await backend.create_run(new_run(retention_days=0))).run.id
    for run_id in (keep, short):
        await backend.cancel_run(run_id)
    clock.advance(2 * 86400)
    assert await backend.sweep(30) == 1
    assert await backend.get_run(short) is None
    assert await backend.sweep(1) == 1  # the cap shortens the 10 days
    assert await backend.get_run(keep) is None
    assert await backend.get_run(live) is not None


# --------------------------------------------------------------------------- notices & loops


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    """Yield to the loop until ``predicate()`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_notices_reach_every_backend_on_the_file(db_path: Path, clock: FakeClock) -> None:
    producer = SQLiteBackend(db_path, clock=clock)
    listener = SQLiteBackend(str(db_path.parent / "." / db_path.name), clock=clock)
    await producer.open()
    await producer.migrate()
    await listener.open()
    got: list[Notice] = []
    arrived = asyncio.Event()

    def on_notice(notice: Notice) -> None:
        got.append(notice)
        arrived.set()

    unsubscribe = await listener.listen(on_notice)
    run_id = (await producer.create_run(new_run())).run.id
    await asyncio.wait_for(arrived.wait(), 5)
    assert got == [Notice("wake", run_id)]
    await producer.cancel_run(run_id)
    await _until(lambda: len(got) == 3)
    assert got[1:] == [Notice("cancel", run_id), Notice("done", run_id)]
    await unsubscribe()
    # A subscriber still listening is the witness: once it heard the next notice, the
    # unsubscribed callback would have heard it too (delivery is in subscription order).
    witness: list[Notice] = []
    stop_witness = await listener.listen(witness.append)
    later = (await producer.create_run(new_run())).run.id
    await _until(lambda: Notice("wake", later) in witness)
    assert len(got) == 3
    await stop_witness()
    await producer.close()
    await listener.close()


_OTHER_PROCESS_STARTS = """
import asyncio, sys
from perdure.backends.sqlite import SQLiteBackend
from perdure.ids import new_run_id
from perdure.records import NewRun

async def main():
    b = SQLiteBackend(sys.argv[1])
    await b.open()
    await b.create_run(NewRun(id=new_run_id(), workflow="wf", version=1, input_json="{}"))
    await b.close()

asyncio.run(main())
"""


async def test_commits_of_another_process_wake_listeners(db_path: Path, tmp_path: Path) -> None:
    # Without the change watcher nothing in this process would ever hear of a commit
    # made by another process (only polling would find it).
    listener = SQLiteBackend(db_path)
    await listener.open()
    await listener.migrate()
    plain: list[Notice] = []
    with_progress: list[Notice] = []
    stop_plain = await listener.listen(plain.append)
    stop_progress = await listener.listen(with_progress.append, progress=True)
    script = tmp_path / "starter.py"
    script.write_text(_OTHER_PROCESS_STARTS)
    done = await asyncio.create_subprocess_exec(sys.executable, str(script), str(db_path))
    assert await done.wait() == 0
    await _until(lambda: Notice("wake") in plain and Notice("progress") in with_progress)
    assert Notice("done") in plain  # result() waiters look again
    assert Notice("progress") not in plain  # progress only to those who asked
    await stop_plain()
    await stop_progress()
    await listener.close()


_PING_APP = """
from perdure import App, Context

app = App()

@app.workflow
async def one(ctx: Context, n: int) -> int:
    return await ctx.step.run("a", lambda: n)
"""


def test_every_hop_between_processes_is_woken_without_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs started one at a time here and served by a worker process, with both
    # safety-net polls (and lease renewals) an hour apart: each start must wake the
    # worker and each end this process, through the change watcher alone, also across
    # WAL checkpoints. During a checkpoint inside COMMIT (SQLite's automatic one,
    # every 1,000 WAL pages) the other process could commit before the watcher's read
    # after COMMIT, which took that commit for this process's own: its run waited for
    # a poll (here: timed out).
    from perdure._end_waiters import RunEndWait

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PERDURE_DATABASE_URL", raising=False)
    monkeypatch.setattr(RunEndWait, "polls", {**RunEndWait.polls, "sqlite": (3600.0, 3600.0)})
    (tmp_path / "ping_app.py").write_text(_PING_APP)
    env = {k: v for k, v in os.environ.items() if k != "PERDURE_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    app = runpy.run_path(str(tmp_path / "ping_app.py"))["app"]
    app.list_workflows()  # migrated before the worker opens the file
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "perdure.cli.main", "worker", "ping_app:app",
             "--poll-interval", "3600", "--lease", "3h"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        for n in range(400):  # over 1,200 commits: a few checkpoints
            assert app.run("one", n, timeout=30) == n, log.read_text()
    finally:
        worker.terminate()
        worker.wait(30)
        app.close()


async def test_own_process_commits_give_no_elsewhere_notices(db_path: Path) -> None:
    # This process's commits already notify directly, run by run; the change watcher
    # must not add "look again" notices for them.
    producer = SQLiteBackend(db_path)
    listener = SQLiteBackend(db_path)
    await producer.open()
    await producer.migrate()
    await listener.open()
    got: list[Notice] = []
    stop = await listener.listen(got.append)
    ids = [(await producer.create_run(new_run())).run.id for _ in range(20)]
    await _until(lambda: Notice("wake", ids[-1]) in got)
    # A commit from another connection is the witness: once its notice arrived, the
    # watcher has looked after every commit above.
    conn = raw(db_path)
    conn.execute("CREATE TABLE witness (x INTEGER)")
    conn.close()
    await _until(lambda: Notice("wake") in got)
    assert got == [Notice("wake", run_id) for run_id in ids] + [
        Notice("wake"),
        Notice("done"),
    ]
    await stop()
    await producer.close()
    await listener.close()


async def test_shared_across_event_loops(backend: SQLiteBackend) -> None:
    errors: list[BaseException] = []

    def use() -> None:
        async def go() -> None:
            for _ in range(10):
                created = await backend.create_run(new_run())
                assert await backend.get_run(created.run.id) is not None

        try:
            asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    page = await backend.list_runs(ListRunsParams(limit=100))
    assert len(page.items) == 40


# --------------------------------------------------------------------------- migrations


async def test_migrate_is_idempotent(db_path: Path) -> None:
    b = SQLiteBackend(db_path)
    await b.open()
    latest = MIGRATIONS[-1].version
    assert await b.migrate() == latest
    assert await b.migrate() == latest
    await b.close()
    conn = raw(db_path)
    try:
        applied = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
        assert applied == [m.version for m in MIGRATIONS]
    finally:
        conn.close()


def test_migrate_concurrently_from_threads(db_path: Path) -> None:
    results: list[int] = []
    barrier = threading.Barrier(8)

    def migrate() -> None:
        async def go() -> int:
            b = SQLiteBackend(db_path)
            try:
                barrier.wait()
                return await b.migrate()
            finally:
                await b.close()

        results.append(asyncio.run(go()))

    threads = [threading.Thread(target=migrate) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [MIGRATIONS[-1].version] * 8
    conn = raw(db_path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
    finally:
        conn.close()


_MIGRATOR = """
import asyncio, sys
from perdure.backends.sqlite import SQLiteBackend

async def main():
    b = SQLiteBackend(sys.argv[1])
    try:
        print(await b.migrate())
    finally:
        await b.close()

asyncio.run(main())
"""


@pytest.mark.slow
def test_migrate_concurrently_from_processes(db_path: Path, tmp_path: Path) -> None:
    script = tmp_path / "migrator.py"
    script.write_text(_MIGRATOR)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(db_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.strip() == str(MIGRATIONS[-1].version)
    conn = raw(db_path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


async def test_newer_schema_is_refused(backend: SQLiteBackend, db_path: Path) -> None:
    conn = raw(db_path)
    conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (999, 0)")
    conn.close()
    with pytest.raises(SchemaVersionError, match=r"999 is newer than this perdure"):
        await backend.migrate()


def test_migration_splits_into_statements() -> None:
    [initial] = [m for m in MIGRATIONS if m.version == 1]
    statements = split_statements(initial.sql)
    assert all(sqlite3.complete_statement(s) for s in statements)
    assert sum(s.lstrip().upper().startswith("CREATE TABLE") for s in _strip(statements)) >= 9
    assert split_statements("-- only a comment\n") == []
    with pytest.raises(ValueError, match="incomplete"):
        split_statements("SELECT 1")


def _strip(statements: list[str]) -> list[str]:
    return [re.sub(r"^(\s*--[^\n]*\n)+", "", s) for s in statements]


def test_queries_file_and_code_agree() -> None:
    used: set[str] = set()
    for source in PACKAGE.glob("*.py"):
        used |= set(re.findall(r'QUERIES\["([a-z_0-9]+)"\]', source.read_text()))
    assert used == {name for name in QUERIES if not name.startswith("_")}  # _x: a part
    raw = (PACKAGE / "sql" / "queries.sql").read_text()
    blocks = re.split(r"^--\s*name:\s*([a-z_0-9]+)\s*$", raw, flags=re.MULTILINE)
    for name, sql in zip(blocks[1::2], blocks[2::2], strict=True):
        lines = sql.strip().splitlines()
        assert lines[0].startswith("-- "), name  # the one-line description
        assert not lines[1].startswith("--"), name


# --------------------------------------------------------------------------- json_contains

CONTAINMENT = [
    # (document, pattern, contained?)
    ({"a": 1, "b": 2}, {"a": 1}, True),
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}, True),
    ({"a": {"b": 1}}, {"a": {"b": 2}}, False),
    ({"a": 1}, {}, True),
    ([], {}, False),
    ({}, [], False),
    ([1, 2, 3], [3, 1], True),
    ([1, 2, 3], [1, 1], True),
    ([1, 2], [1, 4], False),
    ([1, 2], [], True),
    ([[1, 2], [3]], [[1]], True),
    ([[1, 2]], [1], False),
    ([{"a": 1, "b": 2}, {"c": 3}], [{"a": 1}], True),
    ([{"a": 1}], [{"a": 2}], False),
    ({"tags": ["x", "y"]}, {"tags": ["y"]}, True),
    ({"tags": ["x", "y"]}, {"tags": "x"}, False),  # the scalar exception is top-level only
    ([1, 2], 1, True),  # PostgreSQL: a top-level array contains a primitive element
    (["foo", "bar"], "foo", True),
    ([[1]], 1, False),
    (1, [1], False),
    (1, 1, True),
    (1, 1.0, True),
    (1.5, 1.50, True),
    ({"n": 10}, {"n": 1e1}, True),
    (True, 1, False),
    (1, True, False),
    ({"a": True}, {"a": 1}, False),
    ([0, 1], [False], False),
    (None, None, True),
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {"a": False}, False),
    ("a", "a", True),
    ("a", "A", False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": [{"b": [1, 2]}]}, {"a": [{"b": [2]}]}, True),
]


@pytest.mark.parametrize(("doc", "pattern", "expected"), CONTAINMENT)
def test_json_contains_semantics(doc: Any, pattern: Any, expected: bool) -> None:
    doc_text, pattern_text = json.dumps(doc), json.dumps(pattern)
    assert json_contains(doc_text, pattern_text) == int(expected)
    assert contains(json.loads(doc_text), json.loads(pattern_text)) is expected
    conn = sqlite3.connect(":memory:")
    try:
        conn.create_function("json_contains", 2, json_contains, deterministic=True)
        got = conn.execute("SELECT json_contains(?, ?)", (doc_text, pattern_text)).fetchone()[0]
        assert got == int(expected)
        assert conn.execute("SELECT json_contains(NULL, '1')").fetchone()[0] is None
    finally:
        conn.close()


def test_json_contains_big_numbers_compare_exactly() -> None:
    assert json_contains("12345678901234567890", "12345678901234567891") == 0
    assert json_contains("0.1", "0.10000000000000001") == 0
    assert json_contains("100", "1e2") == 1


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ('{"a":1,"b":[1,2]}', '{"b":[1,2.0],"a":1}', True),
        ('{"a":1}', '{"a":true}', False),
        ("[1,2]", "[2,1]", False),
        ('{"a":1}', '{"a":1,"b":null}', False),
        ("null", "null", True),
    ],
)
def test_json_equal(a: str, b: str, equal: bool) -> None:
    assert json_equal(a, b) is equal


async def test_wait_match_uses_containment(backend: SQLiteBackend) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    wait = WaitWrite("w", "paid", '{"order":{"id":7},"tags":["vip"]}')
    await backend.apply([Transition(run_id, c.lease_token, waits=(wait,), outcome=Park("event"))])
    assert await backend.deliver_signal(run_id, "paid", '{"order":{"id":7}}') == "buffered"
    assert await backend.deliver_signal(run_id, "other", '{"order":{"id":7}}') == "buffered"
    payload = '{"order":{"id":7.0,"x":1},"tags":["new","vip"]}'
    assert await backend.deliver_signal(run_id, "paid", payload) == "resolved"
    [step] = await backend.get_steps(run_id)
    assert (step.name, step.kind, step.output["order"]["x"]) == ("w", "wait", 1)


async def test_wake_at_is_none_for_infinity(backend: SQLiteBackend, clock: FakeClock) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    c = await claim_one(backend)
    await backend.apply(
        [Transition(run_id, c.lease_token, waits=(WaitWrite("w", "e"),), outcome=Park("event"))]
    )
    run = await backend.get_run(run_id)
    assert run is not None
    assert run.status == "waiting"
    assert run.wake_at is None
    clock.advance(10 * 365 * 86400)
    assert await backend.claim_runs(ClaimParams("w", PAIRS, 1, 30)) == []
    assert await backend.next_wake_at(PAIRS) is None
    assert run.created_at == datetime.fromtimestamp(T0, UTC)
    assert run.created_at.tzinfo is UTC
    assert timedelta(0) == run.created_at - datetime.fromtimestamp(T0, UTC)


async def test_the_upgrade_takes_lease_tokens_out_of_the_claimed_events_stored_before(
    backend: SQLiteBackend, db_path: Path
) -> None:
    run_id = (await backend.create_run(new_run())).run.id
    await claim_one(backend)
    stored = json.dumps({"worker": "w0", "lease_token": 1795633750577})
    (migration,) = [m for m in MIGRATIONS if m.name.endswith("_claimed_without_token.sql")]
    conn = raw(db_path)
    try:
        conn.execute(
            "INSERT INTO events (run_id, type, data, created_at) VALUES (?, 'claimed', ?, 0)",
            (run_id, stored),
        )
        conn.executescript(migration.sql)
    finally:
        conn.close()
    claimed = [e.data for e in await backend.get_events(run_id) if e.type == "claimed"]
    assert sorted(claimed, key=str) == [{"worker": "w0"}, {"worker": "w1"}]
