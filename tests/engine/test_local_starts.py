"""Starts handed to a worker of the starting process: a start made while one of the
app's workers in this process has a free slot is inserted already leased to it and
handed over, with no notice and no claim query (both backends)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import pytest

from perdure import App, Context, TaskContext, WorkflowFailed
from perdure.backends.base import Backend
from perdure.backends.postgres import PostgresBackend
from perdure.backends.sqlite import SQLiteBackend
from perdure.errors import BackendError
from perdure.records import ClaimParams, CreateResult, NewRun

from .helpers import wait_for

pytestmark = pytest.mark.timeout(120)


def _quick(app: App) -> Callable[..., Any]:
    @app.workflow
    async def quick(ctx: Context, n: int) -> int:
        return await ctx.step.run("double", lambda: 2 * n)

    return quick


def _handed_here(app: App, run_id: str) -> bool:
    """Whether the run was leased in its start's own transaction (its ``claimed`` event
    has the ``created`` event's time) rather than by a later claim."""
    events = {e.type: e for e in app.get_events(run_id)}
    return events["claimed"].created_at == events["created"].created_at


def test_a_start_in_the_workers_process_is_handed_to_it(app: App) -> None:
    quick = _quick(app)
    with app.worker(concurrency=2, poll_interval="60s") as worker:
        app.run(quick, 0, timeout=30)  # its claim loop's first claim may race a start
        before = worker.handed_starts
        assert [app.run(quick, n, timeout=30) for n in range(1, 9)] == list(range(2, 18, 2))
        # Each start finds a free slot, unless a claim woken by the first run's notice
        # still holds them (a race the first runs allow, not the later ones).
        assert worker.handed_starts - before >= 6
        runs = app.list_runs(workflow="quick", limit=100).items
        assert sum(_handed_here(app, r.id) for r in runs) == worker.handed_starts
        for run in runs:
            events = app.get_events(run.id)
            assert [e.type for e in events] == ["created", "claimed", "step_completed", "completed"]
            assert events[1].data["worker"] == worker.id


def test_a_start_goes_the_usual_way_when_no_slot_is_free(app: App) -> None:
    quick = _quick(app)
    release = threading.Event()

    @app.workflow
    async def blocker(ctx: Context, _: None) -> str:
        return await ctx.step.run("hold", lambda: "done" if release.wait(30) else "late")

    with app.worker(concurrency=1) as worker:
        held = app.start(blocker)
        wait_for(lambda: app.get_run(held.id).status == "running")
        handed = worker.handed_starts
        waiting = app.start(quick, 21)  # the only slot is taken: a plain pending run
        assert app.get_run(waiting.id).status == "pending"
        release.set()
        assert waiting.result(timeout=30) == 42
        assert held.result(timeout=30) == "done"
        assert worker.handed_starts == handed
        assert worker.claimed == 2  # the claim loop took the second run
    assert not _handed_here(app, waiting.id)


def test_delayed_limited_and_other_apps_starts_are_not_handed(app: App, database) -> None:  # type: ignore[no-untyped-def]
    quick = _quick(app)

    @app.workflow(concurrency=5)
    async def limited(ctx: Context, n: int) -> int:
        return await ctx.step.run("same", lambda: n)

    other = App(database.url, schema=database.schema, sweep_interval=0)  # a client only
    try:
        with app.worker(concurrency=4) as worker:
            assert app.start(quick, 1, delay="10ms").result(timeout=30) == 2
            assert app.run(limited, 7, timeout=30) == 7
            assert other.run("quick", 3, timeout=30) == 6
            assert worker.handed_starts == 0
            assert worker.claimed == 3
    finally:
        other.close()


def test_a_busy_worker_claims_the_starts_of_other_processes(app: App, database) -> None:  # type: ignore[no-untyped-def]
    # A worker that executes runs waits a few milliseconds after a wake notice before
    # it claims (BUSY_CLAIM_DELAY), to claim the starts of those milliseconds at once:
    # it must still claim them while its own run goes on, with the poll an hour away.
    _quick(app)  # served by the worker, started by the other app
    release = threading.Event()

    @app.workflow
    async def blocker(ctx: Context, _: None) -> str:
        return await ctx.step.run("hold", lambda: "done" if release.wait(60) else "late")

    other = App(database.url, schema=database.schema, sweep_interval=0)  # a client only
    try:
        with app.worker(concurrency=4, poll_interval="1h") as worker:
            held = app.start(blocker)
            wait_for(lambda: app.get_run(held.id).status == "running")
            handles = [other.start("quick", n) for n in range(6)]
            assert [h.result(timeout=30) for h in handles] == [2 * n for n in range(6)]
            assert app.get_run(held.id).status == "running"  # busy all along
            release.set()
            assert held.result(timeout=30) == "done"
            assert worker.claimed >= 6  # another app's starts are never handed over
    finally:
        release.set()
        other.close()


def test_a_start_that_finds_its_run_gives_the_slot_back(app: App) -> None:
    quick = _quick(app)
    with app.worker(concurrency=1):
        first = app.start(quick, 4, idempotency_key="once")
        assert first.result(timeout=30) == 8
        for _ in range(3):
            again = app.start(quick, 4, idempotency_key="once")
            assert not again.created and again.id == first.id
        # With one slot, a reservation kept by those starts would starve the worker.
        assert app.run(quick, 5, timeout=30) == 10


def test_starts_racing_a_stopping_worker_are_all_run_before_any_lease_expires(
    app: App,
) -> None:
    """A start handed over while its worker stops is executed or released by it, never
    left leased to a worker that is gone: the next worker finishes every run well
    before the (long) lease could expire."""
    quick = _quick(app)
    ids: list[str] = []
    stop_starting = threading.Event()

    def starter() -> None:
        n = 0
        while not stop_starting.is_set() or n < 40:
            ids.append(app.start(quick, n).id)
            n += 1

    thread = threading.Thread(target=starter)
    with app.worker(concurrency=4, lease="120s") as worker:
        thread.start()
        wait_for(lambda: worker.handed_starts >= 10, timeout=60)
    stop_starting.set()
    thread.join(60)
    assert not thread.is_alive()
    with app.worker(concurrency=4, lease="120s"):
        for run_id in ids:
            assert app.result(run_id, timeout=60) is not None


def test_a_flow_start_hands_its_first_tasks_to_the_workers_free_slots(app: App) -> None:
    flow = app.flow("diamond")

    @flow.step
    def a(ctx: TaskContext, input: Any) -> int:
        return int(input["run"]) + 1

    @flow.step
    def b(ctx: TaskContext, input: Any) -> int:
        return int(input["run"]) * 2

    @flow.step(depends_on=[a, b])
    def c(ctx: TaskContext, input: Any) -> int:
        return int(input["a"]) + int(input["b"])

    with app.worker(concurrency=4, poll_interval="60s") as worker:
        app.run(flow, 0, timeout=30)  # its claim loop's first claim may race a start
        before = worker.handed_starts
        assert [app.run(flow, n, timeout=30) for n in range(1, 4)] == [
            {"c": 4},
            {"c": 7},
            {"c": 10},
        ]
        assert worker.handed_starts - before >= 4  # two roots per start, mostly
    # Exactly the root tasks handed over were leased in their start's transaction.
    leased_at_start = 0
    for run in app.list_runs(workflow="diamond", limit=100).items:
        for step in ("a", "b"):
            events = app.get_events(f"{run.id}:{step}:0")
            claimed = next(e.created_at for e in events if e.type == "claimed")
            leased_at_start += claimed == run.created_at
    assert leased_at_start == worker.handed_starts


def test_starts_from_many_threads_and_the_claim_loop_never_exceed_concurrency(
    app: App,
) -> None:
    """Starts reserve slots from their own threads while the claim loop reserves from
    the worker's: together they never run more than ``concurrency`` runs at once."""
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def busy(n: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            threading.Event().wait(0.005)  # hold the slot a moment
            return n
        finally:
            with lock:
                running[0] -= 1

    @app.workflow
    async def held(ctx: Context, n: int) -> int:
        return await ctx.step.run("busy", lambda: busy(n))

    ids: list[str] = []

    def starter(k: int) -> None:
        ids.extend(app.start(held, n).id for n in range(k, 60, 4))

    with app.worker(concurrency=2):
        threads = [threading.Thread(target=starter, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(app.result(run_id, timeout=60) for run_id in ids) == list(range(60))
    # Most runs see both paths at work (how many starts find a free slot depends on
    # timing); a reservation that let both take one slot peaks well above two.
    assert peak[0] <= 2


def test_a_background_worker_runs_on_the_apps_own_loop(app: App) -> None:
    """`with app.worker():` serves on the loop of the app's sync API: a body awaits the
    async API there, and a sync call from a body (which would wait on the very loop
    it blocks) fails its run with a clear error instead of hanging."""

    @app.workflow
    async def parent(ctx: Context, n: int) -> int:
        child = await app.start_async("quick", n)
        return int(await app.result_async(child.id, timeout=30))

    @app.workflow
    async def blocking(ctx: Context, n: int) -> int:
        return int(app.run("quick", n, timeout=30))

    _quick(app)
    with app.worker(concurrency=4):
        assert app.run(parent, 21, timeout=60) == 42
        with pytest.raises(WorkflowFailed) as info:
            app.run(blocking, 1, timeout=60)
    assert info.value.error is not None
    assert "use its *_async twin" in info.value.error["message"]


# ------------------------------------------------ a start whose answer was lost


def _lose_an_answer(
    monkeypatch: pytest.MonkeyPatch, *, committed: bool = True, handed: bool = True
) -> list[str]:
    """The first start handed to a worker (``handed``; else any) from now on fails with
    a lost connection, after its commit (``committed``, RELIABILITY's "execute then
    raise") or before it. Returns the ids of the starts it failed (one, once it
    happened)."""
    lost: list[str] = []
    for backend_type in (PostgresBackend, SQLiteBackend):
        for name in ("create_run", "start_flow"):
            real = getattr(backend_type, name)

            async def start(
                self: Backend,
                new: NewRun,
                claim: ClaimParams | None = None,
                _real: Any = real,
            ) -> CreateResult:
                if (handed and claim is None) or lost:
                    return cast(CreateResult, await _real(self, new, claim))
                lost.append(new.id)
                if committed:
                    await _real(self, new, claim)
                raise BackendError("the connection was lost")

            monkeypatch.setattr(backend_type, name, start)
    return lost


def _until_one_is_lost(lost: list[str], start: Callable[[int], Any]) -> list[Any]:
    """Start runs until a hand-over lost its answer (a start may find no free slot
    while the worker's claim loop holds them)."""
    started = []
    for n in range(1, 50):
        started.append(start(n))
        if lost:
            return started
    raise AssertionError("no start was handed to the worker")


def test_a_handed_start_whose_answer_was_lost_is_read_back_and_runs_at_once(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY B2 for a start handed to this process's worker: it committed, its
    answer was lost. The start reads its run back and returns it, and the worker gets
    the run it leased: it runs at once, not after its lease (300 s here)."""
    quick = _quick(app)
    with app.worker(concurrency=2, lease="300s", poll_interval="60s"):
        app.run(quick, 0, timeout=30)  # its claim loop's first claim may race a start
        lost = _lose_an_answer(monkeypatch)
        handles = _until_one_is_lost(lost, lambda n: app.start(quick, n))
        assert [handles[-1].id] == lost and handles[-1].created
        assert handles[-1].result(timeout=30) == 2 * len(handles)
    events = [e.type for e in app.get_events(lost[0])]
    assert events == ["created", "claimed", "step_completed", "completed"]


def test_a_handed_flow_start_whose_answer_was_lost_hands_its_first_tasks_over(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above for a DAG flow: its first task runs at once, and its one attempt is not
    spent on a lapsed lease."""
    flow = app.flow("lost_start", max_attempts=1, timeout=300)

    @flow.step
    def a(ctx: TaskContext, input: Any) -> int:
        return int(input["run"]) + 1

    @flow.step(depends_on=[a])
    def b(ctx: TaskContext, input: Any) -> int:
        return int(input["a"]) * 10

    with app.worker(concurrency=2, lease="300s", poll_interval="60s"):
        app.run(flow, 0, timeout=30)
        lost = _lose_an_answer(monkeypatch)
        handles = _until_one_is_lost(lost, lambda n: app.start(flow, n))
        assert [handles[-1].id] == lost and handles[-1].created
        assert handles[-1].result(timeout=30) == {"b": (len(handles) + 1) * 10}
    events = [e.type for e in app.get_events(f"{lost[0]}:a:0")]
    assert events.count("claimed") == 1 and "lease_expired" not in events
    assert [(s.status, s.attempts) for s in app.get_steps(lost[0])] == [("completed", 1)] * 2


def test_a_start_whose_answer_was_lost_is_read_back_without_a_worker(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = _quick(app)
    lost = _lose_an_answer(monkeypatch, handed=False)
    handle = app.start(quick, 4)
    assert [handle.id] == lost and handle.created
    assert app.get_run(handle.id).status == "pending"
    with app.worker():
        assert handle.result(timeout=30) == 8


def test_a_start_lost_before_its_commit_raises_and_stores_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = _quick(app)
    with app.worker(concurrency=2, poll_interval="60s"):
        app.run(quick, 0, timeout=30)
        lost = _lose_an_answer(monkeypatch, committed=False)
        with pytest.raises(BackendError, match="connection was lost"):
            _until_one_is_lost(lost, lambda n: app.start(quick, n))
        assert lost and lost[0] not in {r.id for r in app.list_runs(limit=100).items}


def test_a_start_with_its_own_run_id_is_not_read_back(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's run id may be another start's too: a lost answer is not read back
    (the start raises; it may have committed, as the caller's retry with the id finds)."""
    quick = _quick(app)
    with app.worker(concurrency=2, poll_interval="60s"):
        app.run(quick, 0, timeout=30)
        lost = _lose_an_answer(monkeypatch)
        with pytest.raises(BackendError, match="connection was lost"):
            _until_one_is_lost(lost, lambda n: app.start(quick, n, run_id=f"mine-{n}"))
        again = app.start(quick, 0, run_id=lost[0])
        assert not again.created and again.id == lost[0]
