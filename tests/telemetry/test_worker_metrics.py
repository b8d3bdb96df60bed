"""A real worker process with ``--metrics-port``: after runs complete, fail, retry and
get signalled, its endpoint (parsed with prometheus_client's parser) has every metric
name and label with the right counts, and runs in flight return to 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from perdure import App, Context
from perdure.telemetry import METRIC_NAMES
from tests.engine.helpers import wait_for

PERDURE = [sys.executable, "-m", "perdure.cli.main"]

WORKER_MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from perdure import App, Context, RetryPolicy

    app = App()
    HERE = Path(__file__).parent
    QUICK = RetryPolicy(max_attempts=2, backoff="fixed", initial="10ms")

    @app.workflow
    async def ok(ctx: Context, x: int) -> int:
        a = await ctx.step.run("add", lambda: x + 1)
        return await ctx.step.run("double", lambda: a * 2)

    def explode() -> None:
        raise ValueError("always")

    @app.workflow
    async def boom(ctx: Context, _: None) -> None:
        await ctx.step.run("explode", explode, retry=QUICK)

    def once_then_fine(tag: str) -> str:
        mark = HERE / f"flaky-{tag}"
        if not mark.exists():
            mark.touch()
            raise RuntimeError("first attempt fails")
        return tag

    @app.workflow
    async def flaky(ctx: Context, tag: str) -> str:
        return await ctx.step.run("call", lambda: once_then_fine(tag), retry=QUICK)

    @app.workflow
    async def approval(ctx: Context, _: None) -> object:
        return await ctx.step.wait_for_event("approve", event="approved")

    @app.workflow
    async def signaller(ctx: Context, ids: list[str]) -> int:
        async def send() -> int:
            for run_id in ids:
                await app.signal_async(run_id, "approved", {"by": "signaller"})
            return len(ids)
        return await ctx.step.run("send", send)

    @app.workflow
    async def hold(ctx: Context, _: None) -> str:
        def wait_for_release() -> str:
            import time
            (HERE / "holding").touch()
            while not (HERE / "release").exists():
                time.sleep(0.01)
            return "released"
        return await ctx.step.run("wait", wait_for_release)
    """
)

WORKFLOWS = ("ok", "boom", "flaky", "approval", "signaller", "hold")


def _client_app(database: Any) -> App:
    app = App(database.url, schema=database.schema)
    for name in WORKFLOWS:

        async def body(ctx: Context, _: Any) -> None:
            raise AssertionError("runs only in the worker process")

        app.workflow(name=name)(body)
    return app


class _Worker:
    """``perdure worker --metrics-port 0`` in a subprocess; its port from its log."""

    def __init__(self, database: Any, cwd: Path) -> None:
        env = dict(os.environ)
        env.update(
            PERDURE_DATABASE_URL=database.url,
            PERDURE_SCHEMA=database.schema,
            PERDURE_SWEEP_INTERVAL="1",
            PYTHONPATH=str(cwd),
        )
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*PERDURE, "worker", "tel_app:app", "--metrics-port", "0", "--lease", "5s"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line: str = wait_for(self._served_at, 30)  # type: ignore[assignment]
        self.url = line.split("serving metrics at ", 1)[1].split()[0]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _served_at(self) -> str | None:
        assert self.proc.poll() is None, "".join(self.lines)
        return next((line for line in self.lines if "serving metrics at" in line), None)

    def scrape(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/plain")
            text = answer.read().decode()
        return {family.name: family for family in text_string_to_metric_families(text)}

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reader.join(timeout=5)
        assert self.proc.returncode == 0, "".join(self.lines)
        return "".join(self.lines)


def _samples(families: dict[str, Any], name: str, suffix: str = "") -> dict[tuple[Any, ...], float]:
    """{sorted label items: value} of one sample name (``suffix``: _count, _bucket ...)."""
    family = families[name]
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if s.name == family.name + suffix
    }


def _by(label: str, samples: dict[tuple[Any, ...], float]) -> dict[Any, float]:
    return {dict(k)[label] if len(k) == 1 else k: v for k, v in samples.items()}


def test_a_worker_process_serves_every_metric_with_the_right_counts(
    database: Any, tmp_path: Path
) -> None:
    (tmp_path / "tel_app.py").write_text(WORKER_MODULE)
    app = _client_app(database)
    worker = _Worker(database, tmp_path)
    try:
        hold = app.start("hold")
        wait_for(lambda: (tmp_path / "holding").exists(), 30)
        during = worker.scrape()
        running = (("state", "running"), ("workflow", "hold"))
        assert _samples(during, "workflow_runs_in_flight")[running] == 1.0

        oks = [app.start("ok", i, retention_days=0) for i in range(2)]
        failing = app.start("boom")
        flaky = app.start("flaky", "f1")
        waiting = [app.start("approval") for _ in range(2)]
        for handle in oks:
            assert handle.result(timeout=30) == (handle.get().input + 1) * 2
        assert flaky.result(timeout=30) == "f1"
        wait_for(lambda: failing.get().status == "failed", 30)
        wait_for(lambda: all(h.get().status == "waiting" for h in waiting), 30)
        assert app.run("signaller", [h.id for h in waiting], timeout=30) == 2
        for handle in waiting:
            assert handle.result(timeout=30) == {"by": "signaller"}
        (tmp_path / "release").touch()
        assert hold.result(timeout=30) == "released"

        # The two ok runs kept for 0 days are swept by the worker's sweeper (every 1 s).
        def swept() -> dict[str, Any] | None:
            families = worker.scrape()
            total = _samples(families, "workflow_retention_swept", "_total")
            return families if total == {(): 2.0} else None

        families: dict[str, Any] = wait_for(swept, 30)  # type: ignore[arg-type]
    finally:
        out = worker.stop()
        app.close()

    for name in METRIC_NAMES:
        base = name.removesuffix("_total")
        assert base in families, (name, sorted(families))

    started = _by("workflow", _samples(families, "workflow_runs_started", "_total"))
    assert started == {"ok": 2, "boom": 1, "flaky": 1, "approval": 2, "signaller": 1, "hold": 1}
    completed = _samples(families, "workflow_runs_completed", "_total")
    assert {(dict(k)["workflow"], dict(k)["status"]): v for k, v in completed.items()} == {
        ("ok", "completed"): 2,
        ("boom", "failed"): 1,
        ("flaky", "completed"): 1,
        ("approval", "completed"): 2,
        ("signaller", "completed"): 1,
        ("hold", "completed"): 1,
    }
    runs = _by("workflow", _samples(families, "workflow_run_duration_seconds", "_count"))
    assert runs == {"ok": 2, "boom": 1, "flaky": 1, "approval": 2, "signaller": 1, "hold": 1}

    steps = _samples(families, "workflow_step_duration_seconds", "_count")
    assert {(dict(k)["workflow"], dict(k)["step"]): v for k, v in steps.items()} == {
        ("ok", "add"): 2,
        ("ok", "double"): 2,
        ("boom", "explode"): 2,  # two attempts
        ("flaky", "call"): 2,
        ("signaller", "send"): 1,
        ("hold", "wait"): 1,
    }
    buckets = families["workflow_step_duration_seconds"].samples
    infinite = [s for s in buckets if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
    assert {(s.labels["workflow"], s.labels["step"]): s.value for s in infinite} == {
        (dict(k)["workflow"], dict(k)["step"]): v for k, v in steps.items()
    }
    retries = _samples(families, "workflow_step_retries", "_total")
    assert {(dict(k)["workflow"], dict(k)["step"]): v for k, v in retries.items()} == {
        ("boom", "explode"): 1,
        ("flaky", "call"): 1,
    }
    signals = _samples(families, "workflow_signals", "_total")
    assert {(dict(k)["workflow"], dict(k)["event"]): v for k, v in signals.items()} == {
        ("approval", "approved"): 2
    }
    in_flight = _samples(families, "workflow_runs_in_flight")
    assert {dict(k)["workflow"] for k in in_flight} == set(WORKFLOWS)
    assert set(in_flight.values()) == {0.0}
    assert _by("workflow", _samples(families, "workflow_queue_depth")) == dict.fromkeys(
        WORKFLOWS, 0.0
    )
    assert _by("workflow", _samples(families, "workflow_claim_lag_seconds")) == dict.fromkeys(
        WORKFLOWS, 0.0
    )
    # No run id is ever a label.
    ids = {h.id for h in [*oks, failing, flaky, *waiting, hold]}
    for family in families.values():
        for sample in family.samples:
            assert not ids & set(sample.labels.values()), sample
    assert "Traceback" not in out, out
