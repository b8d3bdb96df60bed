"""Transactional steps (DESIGN §12): ``ctx.step.transaction(name, fn)`` commits the
user's writes and the step's journal row together or not at all — on each backend."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from perdure import App, Context, RetryPolicy, StepFailed, WorkflowCancelled, current_step

from ..ledger import Ledger
from .helpers import wait_for

FAST = RetryPolicy(max_attempts=3, initial="10ms", max="10ms", jitter=0)


@pytest.fixture
def ledger(database) -> Iterator[Ledger]:  # type: ignore[no-untyped-def]
    ledger = Ledger.on(database)
    yield ledger
    ledger.drop()


@pytest.fixture
def app(ledger: Ledger) -> Iterator[App]:
    app = App(ledger.url, schema=ledger.schema, sweep_interval=0)
    yield app
    app.close()


def test_the_writes_and_the_result_commit_together(app: App, ledger: Ledger) -> None:
    @app.workflow
    async def pay(ctx: Context, amount: int) -> int:
        first = await ctx.step.transaction("debit", ledger.writer(ctx, "debit", amount))
        second = await ctx.step.transaction("credit", ledger.writer(ctx, "credit", amount))
        return first + second

    with app.worker():
        handle = app.start(pay, 21)
        assert handle.result(timeout=30) == 42
    assert ledger.rows() == [(handle.id, "credit"), (handle.id, "debit")]
    steps = {s.name: s for s in app.get_steps(handle.id)}
    assert steps["debit"].output == 21 and steps["debit"].status == "completed"
    assert steps["credit"].attempts == 1


def test_a_failed_attempt_rolls_its_writes_back(app: App, ledger: Ledger) -> None:
    calls = []

    @app.workflow
    async def flaky(ctx: Context, _: None) -> int:
        write = ledger.writer(ctx, "flaky", 7)

        async def once_failing(conn: Any) -> int:
            value = write(conn)
            if not isinstance(value, int):
                value = await value
            calls.append(value)
            if len(calls) == 1:
                raise RuntimeError("after the write, before the commit")
            return value

        return await ctx.step.transaction("flaky", once_failing, retry=FAST)

    with app.worker():
        handle = app.start(flaky)
        assert handle.result(timeout=30) == 7
    assert len(calls) == 2  # the first attempt wrote, then failed: rolled back
    assert ledger.rows() == [(handle.id, "flaky")]
    (step,) = [s for s in app.get_steps(handle.id) if s.name == "flaky"]
    assert step.attempts == 2


def test_a_step_that_fails_for_good_leaves_nothing(app: App, ledger: Ledger) -> None:
    @app.workflow
    async def doomed(ctx: Context, _: None) -> str:
        write = ledger.writer(ctx, "doomed")

        async def failing(conn: Any) -> None:
            value = write(conn)
            if not isinstance(value, int):
                await value
            raise ValueError("no")

        try:
            await ctx.step.transaction("doomed", failing, retry=FAST)
        except StepFailed as exc:
            return exc.error["type"]
        return "unreachable"

    with app.worker():
        assert app.run(doomed, timeout=30) == "ValueError"
    assert ledger.rows() == []


def test_replay_returns_the_journaled_result_without_calling_fn(app: App, ledger: Ledger) -> None:
    calls = []
    lock = threading.Lock()

    @app.workflow
    async def parked(ctx: Context, _: None) -> list[Any]:
        write = ledger.writer(ctx, "once", 5)

        async def counted(conn: Any) -> int:
            with lock:
                calls.append(1)
            value = write(conn)
            return value if isinstance(value, int) else await value

        got = await ctx.step.transaction("once", counted)
        payload = await ctx.step.wait_for_event("go")  # the second pass replays "once"
        return [got, payload]

    with app.worker():
        handle = app.start(parked)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 30)
        assert handle.signal("go", "now")
        assert handle.result(timeout=30) == [5, "now"]
    assert calls == [1]
    assert ledger.rows() == [(handle.id, "once")]


def test_fn_gets_the_applications_connection(app: App, ledger: Ledger) -> None:
    @app.workflow
    async def where(ctx: Context, _: None) -> str:
        if ledger.kind == "sqlite":
            return await ctx.step.transaction(
                "where", lambda conn: conn.execute("PRAGMA database_list").fetchone()[2]
            )

        async def search_path(conn: Any) -> str:
            cur = await conn.execute("SHOW search_path")
            return str((await cur.fetchone())[0])

        return await ctx.step.transaction("where", search_path)

    with app.worker():
        got = app.run(where, timeout=30)
    if ledger.kind == "sqlite":
        assert got == ledger.path  # the run database's own file
    else:
        assert got == ledger.app_schema  # the application's search path, not perdure's


def test_fn_may_not_end_the_transaction_itself(app: App, ledger: Ledger) -> None:
    @app.workflow
    async def rogue(ctx: Context, _: None) -> str:
        write = ledger.writer(ctx, "rogue")

        async def commits(conn: Any) -> None:
            value = write(conn)
            if not isinstance(value, int):
                await value
                await conn.execute("COMMIT")
            else:
                conn.commit()

        try:
            await ctx.step.transaction("rogue", commits, retry=FAST)
        except StepFailed as exc:
            return exc.error["type"]
        return "unreachable"

    with app.worker():
        assert app.run(rogue, timeout=30) == "ValidationError"


def test_bad_arguments_are_refused(app: App) -> None:
    @app.workflow
    async def bad(ctx: Context, what: str) -> str:
        try:
            if what == "fn":
                await ctx.step.transaction("x", 3)  # type: ignore[call-overload]
            elif what == "name":
                await ctx.step.transaction("bad name", lambda conn: None)
            else:
                await ctx.step.transaction("x", lambda conn: None, retry=3)  # type: ignore[call-overload]
        except ValueError as exc:
            return type(exc).__name__
        return "accepted"

    with app.worker():
        for what in ("fn", "name", "retry"):
            assert app.run(bad, what, timeout=30) == "ValidationError"


def test_an_async_fn_on_either_backend_sees_its_step(app: App, ledger: Ledger) -> None:
    @app.workflow
    async def keyed(ctx: Context, _: None) -> str:
        write = ledger.writer(ctx, "keyed")

        async def with_key(conn: Any) -> str:
            value = write(conn)
            if not isinstance(value, int):
                await value
            return current_step().idempotency_key

        return await ctx.step.transaction("keyed", with_key)

    with app.worker():
        handle = app.start(keyed)
        assert handle.result(timeout=30) == f"{handle.id}:keyed"
    assert ledger.rows() == [(handle.id, "keyed")]


def test_cancelling_a_run_inside_fn_commits_nothing(app: App, ledger: Ledger) -> None:
    entered = threading.Event()
    release = threading.Event()

    @app.workflow
    async def stuck(ctx: Context, _: None) -> None:
        write = ledger.writer(ctx, "stuck")

        async def slow(conn: Any) -> int:
            value = write(conn)
            if not isinstance(value, int):
                await value
            entered.set()
            if ledger.kind == "sqlite":  # on the backend's thread: it cannot be interrupted
                release.wait(30)
            else:
                await asyncio.sleep(30)  # cancelled with the run's task
            return 1

        await ctx.step.transaction("stuck", slow)
        await ctx.step.wait_for_event("never")  # the run is live whenever the cancel lands

    @app.workflow
    async def after(ctx: Context, _: None) -> int:
        return await ctx.step.transaction("after", ledger.writer(ctx, "after", 3))

    with app.worker():
        handle = app.start(stuck)
        assert entered.wait(30)
        # SQLite: the step holds the file's write lock, so the cancel waits for its
        # commit; PostgreSQL: the cancel cancels the step's task, rolling it back.
        cancelling = threading.Thread(target=handle.cancel)
        cancelling.start()
        release.set()
        cancelling.join(30)
        with pytest.raises(WorkflowCancelled):
            handle.result(timeout=30)
        later = app.start(after)  # the connection and the worker are fine
        assert later.result(timeout=30) == 3
    journaled = [(handle.id, s.name) for s in app.get_steps(handle.id) if s.name == "stuck"]
    assert ledger.rows() == sorted([(later.id, "after"), *journaled])  # together or not at all
    if ledger.kind == "postgres":
        assert journaled == []


@dataclasses.dataclass
class Receipt:
    step: str
    value: int


def test_a_dataclass_result_is_rebuilt_on_first_run_and_replay(app: App, ledger: Ledger) -> None:
    seen: list[Any] = []

    @app.workflow
    async def typed(ctx: Context, _: None) -> str:
        write = ledger.writer(ctx, "typed", 9)

        async def receipt(conn: Any) -> Receipt:
            value = write(conn)
            return Receipt("typed", value if isinstance(value, int) else await value)

        got = await ctx.step.transaction("typed", receipt)
        seen.append(got)
        await ctx.step.wait_for_event("go")
        return type(got).__name__

    with app.worker():
        handle = app.start(typed)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 30)
        handle.signal("go")
        assert handle.result(timeout=30) == "Receipt"
    assert seen == [Receipt("typed", 9), Receipt("typed", 9)]  # the replay too
