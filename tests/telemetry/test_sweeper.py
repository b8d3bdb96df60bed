"""The retention sweeper: it deletes expired finished runs in batches, counts them in
``workflow_retention_swept_total``, never touches a live run, and on PostgreSQL skips
rows another transaction holds instead of waiting for them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from perdure import App, Context, RunNotFound
from perdure.backends.base import Backend
from perdure.maintenance import sweep_once
from perdure.telemetry import current, enable_metrics
from tests.engine.helpers import wait_for_async


@pytest.fixture
async def app(database: Any) -> AsyncIterator[App]:
    app = App(database.url, schema=database.schema)
    async with app:
        yield app


@pytest.fixture
async def backend(database: Any, app: App) -> AsyncIterator[Backend]:
    await app.migrate_async()
    opened = database.make_backend()
    await opened.open()
    yield opened
    await opened.close()


async def _states(app: App) -> dict[str, list[str]]:
    """Runs in every state: expired finished ones, a kept one and live ones."""

    @app.workflow
    async def quick(ctx: Context, fail: bool) -> str:
        if fail:
            raise ValueError("no")
        return await ctx.step.run("s", lambda: "done")

    @app.workflow
    async def gate(ctx: Context, _: None) -> Any:
        return await ctx.step.wait_for_event("go", event="go")

    worker = app.worker(concurrency=4)
    serving = asyncio.create_task(worker.serve())
    try:
        expired = [(await app.start_async(quick, False, retention_days=0)).id for _ in range(3)]
        expired.append((await app.start_async(quick, True, retention_days=0)).id)
        kept = [(await app.start_async(quick, False, retention_days=30)).id]
        live = [(await app.start_async(gate, retention_days=0)).id for _ in range(2)]
        for run_id in expired + kept:
            try:
                await app.result_async(run_id, timeout=30)
            except Exception:
                pass

        async def all_waiting() -> bool:
            runs = [await app.get_run_async(r) for r in live]
            return all(r.status == "waiting" for r in runs)

        await wait_for_async(all_waiting, 30)
    finally:
        worker.stop()
        await serving
    cancelled = (await app.start_async(gate, retention_days=0)).id
    await app.cancel_async(cancelled)
    expired.append(cancelled)
    live.append((await app.start_async(quick, False, retention_days=0, delay="1h")).id)
    return {"expired": expired, "kept": kept, "live": live}


async def _exists(app: App, run_id: str) -> bool:
    try:
        await app.get_run_async(run_id)
    except RunNotFound:
        return False
    return True


async def test_the_sweeper_removes_expired_finished_runs_in_batches_and_no_live_one(
    app: App, backend: Backend
) -> None:
    runs = await _states(app)
    store = enable_metrics()
    before = store.swept
    removed = await sweep_once(backend, app.settings, current(), batch=2)
    assert removed == len(runs["expired"]) == 5
    assert store.swept - before == 5
    for run_id in runs["expired"]:
        assert not await _exists(app, run_id)
        assert await backend.get_steps(run_id) == []
    for run_id in runs["kept"] + runs["live"]:
        assert await _exists(app, run_id)
    live = [await app.get_run_async(r) for r in runs["live"]]
    assert sorted(r.status for r in live) == ["pending", "waiting", "waiting"]
    assert await sweep_once(backend, app.settings, current()) == 0
    assert store.swept - before == 5


@pytest.mark.postgres
async def test_on_postgres_the_sweeper_skips_a_row_another_transaction_holds(
    postgres_database: Any,
) -> None:
    import psycopg

    database = postgres_database
    async with App(database.url, schema=database.schema) as app:
        await app.migrate_async()
        backend = database.make_backend()
        await backend.open()
        try:
            runs = await _states(app)
            held = runs["expired"][0]
            async with await psycopg.AsyncConnection.connect(database.url) as other:
                await other.execute(
                    f'SELECT id FROM "{database.schema}".runs WHERE id = %s FOR UPDATE', (held,)
                )
                removed = await asyncio.wait_for(sweep_once(backend, app.settings), 20)
                assert removed == len(runs["expired"]) - 1
                assert await _exists(app, held)
                await other.rollback()
            assert await sweep_once(backend, app.settings) == 1
            assert not await _exists(app, held)
        finally:
            await backend.close()
