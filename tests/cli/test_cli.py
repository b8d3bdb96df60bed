"""The `perdure` command through real subprocesses (worker, demo, operations)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perdure import App, Context, RetryPolicy, TaskContext, WorkflowFailed
from tests.engine.helpers import wait_for

PERDURE = [sys.executable, "-m", "perdure.cli.main"]

WORKER_MODULE = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path
    from perdure import App, Context

    app = App()
    MARKS = Path(__file__).parent / "marks"

    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        return await ctx.step.run("greet", lambda: f"hi {name} from pid {os.getpid()}")

    def slow_effect(tag: str) -> str:
        MARKS.mkdir(exist_ok=True)
        (MARKS / f"{tag}-{time.monotonic_ns()}").touch()
        time.sleep(1.5)
        return tag

    @app.workflow
    async def two_slow(ctx: Context, _: None) -> list[str]:
        a = await ctx.step.run("first", lambda: slow_effect("first"))
        b = await ctx.step.run("second", lambda: slow_effect("second"))
        return [a, b]
    """
)


@pytest.fixture
def env(database, tmp_path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    (tmp_path / "cli_app.py").write_text(WORKER_MODULE)
    environ = dict(os.environ)
    environ["PERDURE_DATABASE_URL"] = database.url
    environ["PERDURE_SCHEMA"] = database.schema
    environ["PYTHONPATH"] = str(tmp_path)
    return environ


def _app(database, tmp_path: Path) -> App:  # type: ignore[no-untyped-def]
    """The same workflows, registered in the test process (for starting runs)."""
    app = App(database.url, schema=database.schema)

    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        raise AssertionError("runs only in the worker process")

    @app.workflow
    async def two_slow(ctx: Context, _: None) -> list[str]:
        raise AssertionError("runs only in the worker process")

    return app


def _spawn_worker(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PERDURE, "worker", "cli_app:app", "--lease", "5s", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(
    proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 30
) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"worker did not stop in {timeout}s:\n{out}") from None
    return proc.returncode, out


def test_worker_in_a_separate_process_runs_what_this_process_starts(
    database, env, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    app = _app(database, tmp_path)
    proc = _spawn_worker(env, tmp_path, "--concurrency", "2")
    try:
        output = app.run("greet", "ada", timeout=30)
        assert output.startswith("hi ada from pid ") and output != f"hi ada from pid {os.getpid()}"
        assert int(output.rsplit(" ", 1)[1]) == proc.pid
    finally:
        code, out = _stop(proc)
        app.close()
    assert code == 0, out


def test_sigusr1_logs_what_the_worker_is_waiting_on(database, env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = _app(database, tmp_path)
    proc = _spawn_worker(env, tmp_path)
    try:
        app.run("greet", "ada", timeout=30)  # it serves: its signal handlers are set
        proc.send_signal(signal.SIGUSR1)  # handled before the SIGTERM that follows
    finally:
        code, out = _stop(proc)
        app.close()
    assert code == 0, out
    dump = out.split("what this worker is waiting on (SIGUSR1):", 1)[1].split("end of the dump")[0]
    assert "--- task perdure-heartbeat (awaiting" in dump, out
    assert "--- thread MainThread" in dump, out


def test_sigterm_is_graceful_the_in_flight_step_commits_and_the_run_is_released(
    database,
    env,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    app = _app(database, tmp_path)
    proc = _spawn_worker(env, tmp_path, "--log-format", "json")
    try:
        handle = app.start("two_slow")
        wait_for(lambda: (tmp_path / "marks").exists() and any((tmp_path / "marks").iterdir()), 30)
        code, out = _stop(proc)
        assert code == 0, out
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]  # all JSON
        released = [e for e in lines if e.get("outcome") == "released"]
        assert [e["run_id"] for e in released] == [handle.id], out
        assert released[0]["workflow"] == "two_slow" and released[0]["level"] == "INFO"
        run = handle.get()
        assert run.status == "waiting" and run.wake_reason is None, run
        assert [s.name for s in app.get_steps(handle.id)] == ["first"]
        # Another worker picks it up at once (no lease to wait for) and does not redo "first".
        proc = _spawn_worker(env, tmp_path)
        assert handle.result(timeout=30) == ["first", "second"]
    finally:
        _stop(proc)
        app.close()
    marks = sorted(p.name.split("-")[0] for p in (tmp_path / "marks").iterdir())
    assert marks == ["first", "second"]


def test_operations_commands(database, env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*PERDURE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    assert "version" in cli("migrate").stdout
    app = _app(database, tmp_path)
    try:
        app.list_workflows()  # registers the workflows in the database
        run_id = cli("start", "greet", "--input", '"bob"').stdout.strip()
        assert app.get_run(run_id).input == "bob"
        listed = json.loads(cli("runs", "list", "--json").stdout)
        assert [r["id"] for r in listed["items"]] == [run_id]
        assert run_id in cli("runs", "show", run_id).stdout
        assert "greet" in cli("workflows").stdout
        assert cli("signal", run_id, "poke", "--payload", '{"a": 1}').returncode == 0
        assert "cancelled" in cli("cancel", run_id).stdout
        assert cli("cancel", run_id, check=False).returncode == 1
        bad = cli("start", "greet", "--input", "{not json", check=False)
        assert bad.returncode == 2 and "not valid JSON" in bad.stderr
        unknown = cli("start", "nope", check=False)
        assert unknown.returncode == 0 and "no process has registered" in unknown.stderr
        assert app.get_run(unknown.stdout.strip()).status == "pending"
        missing = cli("runs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV", check=False)
        assert missing.returncode == 1 and "no run" in missing.stderr
        # Bad input gets one clear line, no traceback, and stores nothing.
        refused = [
            ("start", "greet", "--input", "9" * 5000),
            ("start", "greet", "--input", "[" * 100_000),
            ("start", "greet", "--input", "[" * 65 + "]" * 65),
            ("start", "greet", "--wait", "--timeout", "-1"),
            ("start", "greet", "--idempotency-key", ""),
            ("start", "greet", "--idempotency-key", "tenant/42"),
            ("start", "greet", "--idempotency-key", ".."),
            ("publish", "poke", "--idempotency-key", "a/../b"),
            ("start", "greet", "--delay", "soon"),
            ("signal", run_id, "bad event!"),
            ("publish", "bad event!"),
        ]
        for args in refused:
            result = cli(*args, check=False)
            assert result.returncode in (1, 2), (args, result.stderr)
            assert "Traceback" not in result.stderr, (args, result.stderr)
            assert len(result.stderr.strip().splitlines()) <= 6, (args, result.stderr)
        assert len(app.list_runs().items) == 2  # greet and the accepted start of nope
    finally:
        app.close()


def test_demo_runs_on_the_embedded_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERDURE_")}
    started = time.monotonic()
    result = subprocess.run(
        [*PERDURE, "demo", "--runs", "3", "--cool-off", "300ms"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" completed: ") == 3, result.stdout
    assert (tmp_path / "perdure.db").exists()
    assert time.monotonic() - started >= 0.3  # the durable sleep really slept


def test_read_commands_tell_the_story_of_a_run(database, env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*PERDURE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    app = App(database.url, schema=database.schema)
    tries: list[int] = []

    def call() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("gateway [timeout]")
        return "ok"

    @app.workflow
    async def approval(ctx: Context, _: object) -> object:
        return await ctx.step.wait_for_event("approval", timeout="1h")

    @app.workflow
    async def story(ctx: Context, data: dict[str, str]) -> object:
        await ctx.step.run("call", call, retry=RetryPolicy(initial="10ms", jitter=0))
        return await ctx.step.run_workflow("ask", approval, None)

    try:
        with app.worker():
            parent = app.start(story, {"kind": "story", "note": "[bold]x[/]"})
            child = wait_for(lambda: app.list_runs(parent_id=parent.id).items)[0]
            wait_for(lambda: app.get_run(child.id).status == "waiting")
            wait_for(lambda: app.get_run(parent.id).status == "waiting")
            shown = cli("runs", "show", parent.id).stdout
            assert "attempt 1 failed: ConnectionError: gateway [timeout]" in shown
            assert '"note": "[bold]x[/]"' in shown  # stored values print literally
            assert f"child:  {child.id} approval@1 waiting" in shown
            assert "waits for: a child run" in shown
            shown = cli("runs", "show", child.id).stdout
            assert "waits for: event approval (until" in shown
            assert f"parent: {parent.id} (its step ask)" in shown
            story_json = json.loads(cli("runs", "show", parent.id, "--json").stdout)
            assert [c["id"] for c in story_json["children"]] == [child.id]
            assert any(e["type"] == "step_retrying" for e in story_json["events"])

            def ids(*args: str) -> list[str]:
                return [
                    r["id"]
                    for r in json.loads(cli("runs", "list", "--json", *args).stdout)["items"]
                ]

            assert ids("--parent", parent.id) == [child.id]
            assert ids("--input", "kind=story") == [parent.id]
            assert ids("--input-match", '{"note": "[bold]x[/]"}') == [parent.id]
            assert ids("--since", "1h") == [child.id, parent.id]
            assert ids("--until", "1h") == []
            assert ids("--since", "2000-01-01T00:00Z") == [child.id, parent.id]
            bad = cli("runs", "list", "--since", "yesterday-ish", check=False)
            assert bad.returncode == 2 and "--since" in bad.stderr
            assert app.signal(child.id, "approval", "yes")
            assert parent.result(timeout=30) == "yes"
        workflows = {w["name"]: w for w in json.loads(cli("workflows", "--json").stdout)}
        assert workflows["story"]["counts"]["completed"] == 1
        workers = json.loads(cli("workers", "--json").stdout)
        assert [w["state"] for w in workers] == ["stopped"]  # the worker above has stopped
        assert "stopped" in cli("workers").stdout
        # Error text with markup characters prints literally, in one line.
        markup = cli("start", "bad[/]name", check=False)
        assert markup.returncode == 1 and "'bad[/]name'" in markup.stderr
        assert len(markup.stderr.strip().splitlines()) == 1
    finally:
        app.close()


def test_runs_show_gives_a_flow_run_by_step(database, env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A flow run's children are its tasks: shown by step (tasks done out of all, the
    attempts, a few of the tasks' last errors), not as a line per task."""
    app = App(database.url, schema=database.schema)
    flow = app.flow("odd_ones", max_attempts=2, base_delay=0)

    @flow.step
    def items(ctx: TaskContext, input: object) -> list[int]:
        return list(range(10))

    entered: set[int] = set()
    all_in = asyncio.Event()

    @flow.map(over=items)
    async def each(ctx: TaskContext, n: int) -> int:
        if n % 2 and ctx.attempt == 1:  # the five fail their first attempt together,
            entered.add(n)  # so each has an error before any fails for good
            if len(entered) == 5:
                all_in.set()
            await asyncio.wait_for(all_in.wait(), 30)
        if n % 2:
            raise ValueError(f"odd {n}")
        return n

    try:
        with app.worker():
            handle = app.start(flow, None)
            with pytest.raises(WorkflowFailed):
                handle.result(timeout=30)
        shown = subprocess.run(
            [*PERDURE, "runs", "show", handle.id],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout
        assert "child:" not in text and "tasks:  11 in 2 steps" in text
        assert "StepFailed: step 'each' failed: ValueError: odd" in text
        rows = {line.split("│")[3].strip(): line for line in text.splitlines() if "│ +" in line}
        assert "1/1" in rows["items"] and "completed" in rows["items"]
        assert "failed" in rows["each"] and "/10" in rows["each"]
        erred = [line for line in text.splitlines() if "its last error: ValueError: odd" in line]
        assert len(erred) == 3 and "and 2 more tasks" in text  # five erred
    finally:
        app.close()


def test_an_unreachable_database_is_one_clear_line_at_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERDURE_")}
    env["PERDURE_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/nowhere"
    result = subprocess.run(
        [*PERDURE, "runs", "list"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to PostgreSQL"), lines


def test_runs_retry_fork_and_bulk_commands(database, env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def cli(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*PERDURE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == code, result.stdout + result.stderr
        return result

    app = App(database.url, schema=database.schema)
    broken = {"b"}

    def step(name: str) -> str:
        if name in broken:
            raise RuntimeError(f"{name} is broken")
        return name

    @app.workflow
    async def pipe(ctx: Context, _: object) -> list[str]:
        once = RetryPolicy(max_attempts=1)
        return [await ctx.step.run(n, step, n, retry=once) for n in ("a", "b", "c")]

    try:
        with app.worker():
            first, second, third = (app.start(pipe) for _ in range(3))
            for handle in (first, second, third):
                run_id = handle.id
                wait_for(lambda: app.get_run(run_id).status == "failed", 30)  # noqa: B023
            broken.clear()
            single = json.loads(cli("runs", "retry", first.id, "--from-step", "b", "--json").stdout)
            assert single == {"retried": [first.id]}
            assert first.result(timeout=30) == ["a", "b", "c"]
            bulk = json.loads(cli("runs", "retry", "--workflow", "pipe", "--json").stdout)
            assert sorted(bulk["retried"]) == sorted([second.id, third.id])
            assert third.result(timeout=30) == ["a", "b", "c"]
            fork = json.loads(cli("runs", "fork", first.id, "--from-step", "c", "--json").stdout)
            [forked] = fork["forked"]
            assert app.result(forked, timeout=30) == ["a", "b", "c"]
        waiting = app.start(pipe)  # no worker now: pending
        cancelled = json.loads(cli("runs", "cancel", "--status", "pending", "--json").stdout)
        assert cancelled == {"cancelled": [waiting.id]}
        assert "only a failed or cancelled run" in cli("runs", "retry", first.id, code=1).stderr
        assert "say which runs" in cli("runs", "retry", code=1).stderr
        # a status no run of which can be retried (or cancelled) is an error, not a no-op
        refused = cli("runs", "retry", "--workflow", "pipe", "--status", "running", code=1)
        assert "one of failed, cancelled" in refused.stderr
        refused = cli("runs", "cancel", "--workflow", "pipe", "--status", "failed", code=1)
        assert "one of pending, running, waiting" in refused.stderr
    finally:
        app.close()


def test_runs_watch_follows_a_run_until_it_ends(database, env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema)

    @app.workflow
    async def noted(ctx: Context, _: object) -> str:
        await ctx.set("stage", "half")
        await ctx.step.wait_for_event("go")
        return "done"

    try:
        with app.worker():
            handle = app.start(noted)
            wait_for(lambda: app.get_run(handle.id).status == "waiting", 30)
            watcher = subprocess.Popen(
                [*PERDURE, "runs", "watch", handle.id, "--json"],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            handle.signal("go")
            out, err = watcher.communicate(timeout=60)
        assert watcher.returncode == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[0]["type"] == "created" and lines[-1]["type"] == "completed"
        assert {"type": "value", "data": {"key": "stage", "value": "half"}} in [
            {"type": x["type"], "data": x["data"]} for x in lines
        ]
    finally:
        app.close()
