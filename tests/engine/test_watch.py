"""Watching a run (DESIGN §4): its history so far, then every event as it happens,
ending with the run — across a worker restart, from async and sync code."""

from __future__ import annotations

import asyncio
import threading

import pytest

from perdure import App, Context, Event, RunNotFound, TaskContext, ValidationError

from .helpers import wait_for, wait_for_async


def _gated(app: App) -> object:
    @app.workflow
    async def gated(ctx: Context, _: None) -> str:
        first = await ctx.step.run("first", lambda: "one")
        gate = await ctx.step.wait_for_event("gate")
        second = await ctx.step.run("second", lambda: "two")
        return f"{first} {gate} {second}"

    return gated


def test_watch_sees_every_event_in_order_until_the_run_ends(app: App) -> None:
    gated = _gated(app)
    seen: list[Event] = []
    with app.worker():
        handle = app.start(gated)  # type: ignore[arg-type]
        watcher = threading.Thread(target=lambda: seen.extend(app.watch(handle.id)))
        watcher.start()
        wait_for(lambda: any(e.type == "waiting" for e in seen), 20)
        handle.signal("gate", "open")
        watcher.join(timeout=30)
        assert not watcher.is_alive()
        assert handle.result(timeout=10) == "one open two"
    assert seen == app.get_events(handle.id)  # all of them, in order, each once
    types = [e.type for e in seen]
    assert types[0] == "created" and types[-1] == "completed"
    assert types.index("signaled") > types.index("waiting")
    steps = [e.data["step"] for e in seen if e.type == "step_completed"]
    assert steps == ["first", "gate", "second"]


async def test_watch_async_goes_on_across_a_worker_restart(app: App) -> None:
    gated = _gated(app)
    handle = await app.start_async(gated)  # type: ignore[arg-type]
    seen: list[str] = []

    async def watch() -> None:
        async for event in app.watch_async(handle.id):
            seen.append(event.type)  # noqa: PERF401 (seen grows while the run goes on)

    watching = asyncio.create_task(watch())
    worker = app.worker()
    serving = asyncio.create_task(worker.serve())

    async def parked() -> bool:
        return "waiting" in seen

    await wait_for_async(parked, 20)
    worker.stop()
    await asyncio.wait_for(serving, 20)  # the first worker is gone
    await app.signal_async(handle.id, "gate", "open")
    again = app.worker()
    serving = asyncio.create_task(again.serve())
    await asyncio.wait_for(watching, 30)  # ends with the run
    again.stop()
    await asyncio.wait_for(serving, 20)
    assert seen[-1] == "completed"
    assert seen == [e.type for e in await app.get_events_async(handle.id)]


def test_watching_an_ended_run_gives_its_history_and_ends(app: App) -> None:
    @app.workflow
    async def quick(ctx: Context, _: None) -> int:
        return await ctx.step.run("one", lambda: 1)

    with app.worker():
        handle = app.start(quick)
        assert handle.result(timeout=20) == 1
    assert list(app.watch(handle.id)) == app.get_events(handle.id)
    with pytest.raises(RunNotFound):
        list(app.watch("no-such-run"))


def test_values_are_durable_replay_stable_and_watched(app: App) -> None:
    passes: list[int] = []

    @app.workflow
    async def progress(ctx: Context, _: None) -> str:
        passes.append(1)
        await ctx.set("stage", "reserving")
        await ctx.set("pass", len(passes))  # a replay does not write again
        await ctx.step.wait_for_event("go")
        await ctx.set("stage", "done")
        return "ok"

    seen: list[Event] = []
    with app.worker():
        handle = app.start(progress)
        watcher = threading.Thread(target=lambda: seen.extend(app.watch(handle.id)))
        watcher.start()
        wait_for(lambda: app.get_values(handle.id) == {"stage": "reserving", "pass": 1}, 20)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 20)
        handle.signal("go")
        assert handle.result(timeout=20) == "ok"
        watcher.join(timeout=20)
    assert len(passes) == 2  # the body ran again after the wait, replaying the values
    assert app.get_values(handle.id) == {"stage": "done", "pass": 1}
    values = [e.data for e in seen if e.type == "value"]
    assert values == [
        {"key": "stage", "value": "reserving"},
        {"key": "pass", "value": 1},
        {"key": "stage", "value": "done"},
    ]
    with pytest.raises(RunNotFound):
        app.get_values("no-such-run")


def test_a_bad_value_key_or_value_fails_the_step_call(app: App) -> None:
    @app.workflow
    async def bad(ctx: Context, which: str) -> str:
        try:
            if which == "key":
                await ctx.set("no spaces", 1)
            else:
                await ctx.set("fine", {1, 2})
        except ValidationError as exc:
            return str(exc)
        return "accepted"

    with app.worker():
        assert "invalid value key 'no spaces'" in app.run(bad, "key", timeout=20)
        assert "value 'fine'" in app.run(bad, "value", timeout=20)


def test_watching_a_flow_run_shows_its_steps_as_they_start_and_end(app: App) -> None:
    flow = app.flow("watched_flow")
    release = threading.Event()

    @flow.step
    async def a(ctx: TaskContext, input: object) -> list[int]:
        return [1, 2]

    @flow.map(over=a)
    def b(ctx: TaskContext, n: int) -> int:
        assert release.wait(30)
        return n

    seen: list[Event] = []
    with app.worker():
        handle = app.start(flow)
        watcher = threading.Thread(target=lambda: seen.extend(app.watch(handle.id)))
        watcher.start()
        wait_for(lambda: any(e.type == "step_started" and e.data["step"] == "b" for e in seen), 20)
        assert not any(e.type == "step_completed" and e.data["step"] == "b" for e in seen)
        release.set()
        watcher.join(timeout=30)
        assert not watcher.is_alive()
    progress = [(e.type, e.data) for e in seen if e.type.startswith("step_")]
    assert progress == [
        ("step_started", {"step": "a", "tasks": 1}),
        ("step_completed", {"step": "a"}),
        ("step_started", {"step": "b", "tasks": 2}),
        ("step_completed", {"step": "b"}),
    ]
    assert [e.type for e in seen if not e.type.startswith("step_")] == ["created", "completed"]
    assert seen[-1].type == "completed"
