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
