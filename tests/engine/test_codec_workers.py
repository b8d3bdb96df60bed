"""No worker runs on a value it cannot read (issue 37, defect 3): a run sealed by a codec
and claimed by a worker without the codec, or with a wrong key, waits (wake reason
``undecodable``) instead of running on the envelope, and a worker with the key finishes
it. Real worker processes, on each backend."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from perdure import App
from perdure.codec import FernetCodec

from .helpers import wait_for
from .test_codec import raw_rows

KEY = FernetCodec.generate_key()
CARD = "4111-s3cret-card-9e2"

SEALED_APP = textwrap.dedent(
    """
    import os
    from pathlib import Path
    from perdure import App, Context
    from perdure.codec import FernetCodec

    key = os.environ.get("SEAL_KEY")
    app = App(codec=FernetCodec(key)) if key else App()
    MARKS = Path(os.environ["SEAL_MARKS"])

    @app.workflow
    async def checkout(ctx: Context, order: dict) -> dict:
        MARKS.mkdir(exist_ok=True)
        (MARKS / f"body-{os.getpid()}").touch()
        copied = await ctx.step.run("copy", lambda: dict(order))
        return {"order": copied, "seen_by": os.environ.get("SEAL_NAME")}
    """
)


def _worker(tmp_path: Path, database: Any, name: str, key: str | None) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": database.url,
        "PERDURE_SCHEMA": database.schema,
        "PYTHONPATH": str(tmp_path),
        "SEAL_MARKS": str(tmp_path / f"marks-{name}"),
        "SEAL_NAME": name,
    }
    env.pop("SEAL_KEY", None)
    if key is not None:
        env["SEAL_KEY"] = key
    command = [sys.executable, "-m", "perdure.cli.main", "worker", "sealed_app:app"]
    with (tmp_path / f"{name}.log").open("w") as log:  # the worker keeps its own copy
        return subprocess.Popen(
            [*command, "--poll-interval", "0.2"],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _move_clock(database: Any, seconds: float) -> None:
    async def go() -> None:
        backend = database.make_backend()
        await backend.open()
        try:
            await backend.set_clock_offset(await backend.clock_offset() + seconds)
        finally:
            await backend.close()

    asyncio.run(go())


@pytest.mark.parametrize("reader", ["no codec", "wrong key"])
def test_a_worker_that_cannot_read_a_sealed_run_parks_it_for_one_that_can(
    database: Any, tmp_path: Path, reader: str
) -> None:
    (tmp_path / "sealed_app.py").write_text(SEALED_APP)
    producer = App(database.url, schema=database.schema, codec=FernetCodec(KEY))
    try:
        run_id = producer.start("checkout", {"card": CARD, "total": 42}).id
        other_key = None if reader == "no codec" else FernetCodec.generate_key()
        blind = _worker(tmp_path, database, "blind", other_key)
        try:
            wait_for(lambda: producer.get_run(run_id).wake_reason == "undecodable", 60)
        finally:
            _stop(blind)
        parked = producer.get_run(run_id)
        # Parked, not failed; the body never ran; nothing was stored, in clear or not.
        assert (parked.status, parked.output, parked.error) == ("waiting", None, None)
        assert not (tmp_path / "marks-blind").exists()
        assert producer.get_steps(run_id) == []
        [event] = [e for e in producer.get_events(run_id) if e.type == "undecodable"]
        expected = "no codec" if reader == "no codec" else "cannot decode: "
        assert event.data["reason"].startswith(expected) and event.data["retry_in"] == 5
        assert "undecodable" in (tmp_path / "blind.log").read_text()  # the worker's warning
        assert CARD not in raw_rows(database)
        shown = subprocess.run(
            [sys.executable, "-m", "perdure.cli.main", "runs", "show", run_id],
            env={**os.environ, "PERDURE_DATABASE_URL": database.url,
                 "PERDURE_SCHEMA": database.schema, "COLUMNS": "200"},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "waits for: a worker that can open its sealed values" in shown.stdout, shown

        _move_clock(database, 301)  # past any backoff it got, without waiting for it
        sighted = _worker(tmp_path, database, "sighted", KEY)
        try:
            result = producer.result(run_id, timeout=60)
        finally:
            _stop(sighted)
        assert result == {"order": {"card": CARD, "total": 42}, "seen_by": "sighted"}
        assert (tmp_path / "marks-sighted").exists()
        assert CARD not in raw_rows(database)
    finally:
        producer.close()


def test_a_sealed_step_result_in_the_journal_is_never_replayed_without_the_codec(
    database: Any,
) -> None:
    """The input is in clear (started without the codec) but a codec worker sealed the
    step result it journaled: a worker without the codec parks the run instead of
    replaying that result into the body."""
    plain = App(database.url, schema=database.schema, sweep_interval=0)
    sealed = App(database.url, schema=database.schema, sweep_interval=0, codec=FernetCodec(KEY))
    bodies: dict[str, int] = {"plain": 0, "sealed": 0}

    def register(app: App, name: str) -> None:
        @app.workflow
        async def card(ctx: Any, order: dict[str, Any]) -> Any:
            bodies[name] += 1
            number = await ctx.step.run("lookup", lambda: {"card": CARD, "order": order["n"]})
            await ctx.step.wait_for_event("go")
            return number

    register(plain, "plain")
    register(sealed, "sealed")
    try:
        run_id = plain.start("card", {"n": 7}).id
        with sealed.worker():
            wait_for(lambda: plain.get_run(run_id).wake_reason == "event", 30)
        plain.signal(run_id, "go", {"ok": True})
        ran_before = dict(bodies)
        with plain.worker():
            wait_for(lambda: plain.get_run(run_id).wake_reason == "undecodable", 30)
        assert bodies == ran_before  # the plain worker never entered the body
        run = plain.get_run(run_id)
        assert (run.status, run.output, run.error) == ("waiting", None, None)
        assert CARD not in raw_rows(database)

        _move_clock(database, 301)
        with sealed.worker():
            assert sealed.result(run_id, timeout=30) == {"card": CARD, "order": 7}
        assert bodies["plain"] == 0
    finally:
        plain.close()
        sealed.close()


@pytest.mark.parametrize("reader", ["no codec", "wrong key"])
def test_a_schedule_with_a_sealed_input_is_fired_only_where_it_can_be_read(
    database: Any, reader: str, caplog: pytest.LogCaptureFixture
) -> None:
    other = None if reader == "no codec" else FernetCodec(FernetCodec.generate_key())
    blind = App(database.url, schema=database.schema, sweep_interval=0, codec=other)
    sealed = App(database.url, schema=database.schema, sweep_interval=0, codec=FernetCodec(KEY))
    for app in (blind, sealed):

        @app.workflow
        async def nightly(ctx: Any, input: dict[str, Any]) -> Any:
            return input["card"]

    try:
        before = sealed.schedule("nightly", "nightly", "* * * * *", input={"card": CARD})
        _move_clock(database, 61)  # its first tick is due
        with caplog.at_level("WARNING", logger="perdure.worker"), blind.worker():
            wait_for(lambda: "schedule nightly is not fired here" in caplog.text, 30)
        assert blind.list_runs(workflow="nightly").items == []
        [schedule] = blind.list_schedules()
        assert schedule.next_at == before.next_at  # still due, for a worker that can read it

        with sealed.worker():
            [run] = wait_for(lambda: sealed.list_runs(workflow="nightly").items, 30)
            assert sealed.result(run.id, timeout=30) == CARD
        assert CARD not in raw_rows(database)
    finally:
        blind.close()
        sealed.close()


def test_a_sealed_signal_that_beats_a_timeout_never_reaches_the_body(database: Any) -> None:
    """The race inside a pass: the wait's timeout is being journaled when a sealed signal
    resolves it first, so the stored row wins. A worker without the codec stops the pass
    there (the body never gets the envelope); the next claim parks the run."""
    plain = App(database.url, schema=database.schema, sweep_interval=0)
    sealed = App(database.url, schema=database.schema, sweep_interval=0, codec=FernetCodec(KEY))
    passes: list[str] = []
    seen: list[Any] = []

    @plain.workflow
    async def racer(ctx: Any, _: None) -> Any:
        await ctx.step.run("first", lambda: 1)
        passes.append(ctx.run_id)
        if len(passes) == 2:  # the pass that journals the timeout: the signal comes first
            await asyncio.to_thread(sealed.signal, ctx.run_id, "go", {"card": CARD})
        got = await ctx.step.wait_for_event("go", timeout=5)
        seen.append(got)
        return got

    @sealed.workflow(name="racer")
    async def racer_with_key(ctx: Any, _: None) -> Any:
        await ctx.step.run("first", lambda: 1)
        return await ctx.step.wait_for_event("go", timeout=5)

    try:
        run_id = plain.start("racer").id
        with plain.worker():
            wait_for(lambda: plain.get_run(run_id).wake_reason == "event", 30)
            _move_clock(database, 6)  # the timeout passed: the next pass journals it
            wait_for(
                lambda: len(passes) == 2 and any(s.name == "go" for s in plain.get_steps(run_id)),
                30,
            )
            _move_clock(database, 31)  # the stopped pass's lease runs out
            wait_for(lambda: plain.get_run(run_id).wake_reason == "undecodable", 30)
        assert (len(passes), seen) == (2, [])  # the body never received the envelope
        run = plain.get_run(run_id)
        assert (run.status, run.output, run.error) == ("waiting", None, None)

        _move_clock(database, 301)
        with sealed.worker():
            assert sealed.result(run_id, timeout=30) == {"card": CARD}
    finally:
        plain.close()
        sealed.close()
