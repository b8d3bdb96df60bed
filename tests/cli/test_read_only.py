"""The `perdure` command on an SQLite file that its user cannot write.

The file is mode 0444 in a directory of mode 0555. The tests run as root, whom file
modes do not stop, so as root each command runs in a real process started through
util-linux's ``setpriv`` without the capabilities that let root ignore them
(``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``, ``CAP_FOWNER``); as another user it
runs as is. Either way the kernel, not a perdure flag, makes the file read-only,
which is what an operator meets on an archived or read-only-mounted database. The
file was checkpointed before it was made read-only, so no ``-wal`` holds commits,
and no ``-shm`` index can be created beside it: perdure opens it as immutable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from perdure import App, Context
from tests.server.harness import free_port

PERDURE = [sys.executable, "-m", "perdure.cli.main"]

APP_MODULE = textwrap.dedent(
    """
    from perdure import App, Context

    app = App()

    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        return await ctx.step.run("hello", lambda: f"hi {name}")
    """
)


@dataclass
class ReadOnlyFile:
    folder: Path
    path: Path
    done: str
    pending: str
    env: dict[str, str]

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def _as_reader(command: list[str]) -> list[str]:
    """``command`` run so that file modes apply to it (see the module's docstring)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux's setpriv to drop CAP_DAC_OVERRIDE")
    return [setpriv, f"--bounding-set=-{',-'.join(_ROOT_BYPASS)}", *command]


_ROOT_BYPASS = ("dac_override", "dac_read_search", "fowner")


@pytest.fixture
def read_only_file(tmp_path: Path) -> Iterator[ReadOnlyFile]:
    folder = tmp_path
    try:
        modules = folder / "modules"
        modules.mkdir()
        (modules / "ro_app.py").write_text(APP_MODULE)
        data = folder / "data"
        data.mkdir()
        path = data / "perdure.db"
        app = App(f"sqlite:///{path}", sweep_interval=0)

        @app.workflow
        async def greet(ctx: Context, name: str) -> str:
            return await ctx.step.run("hello", lambda: f"hi {name}")

        try:
            done = app.start("greet", "ada")
            with app.worker(concurrency=1):
                assert app.result(done.id, timeout=30) == "hi ada"
            pending = app.start("greet", "bob")
        finally:
            app.close()
        with sqlite3.connect(path) as conn:  # every commit into the file itself
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        path.chmod(0o444)
        data.chmod(0o555)
        env = dict(os.environ)
        env.pop("PERDURE_READ_ONLY", None)
        env.pop("PERDURE_APP", None)
        env.update(
            PERDURE_DATABASE_URL=f"sqlite:///{path}",
            PYTHONPATH=str(modules),
        )
        probe = subprocess.run(
            _as_reader([sys.executable, "-c", f"open({str(path)!r}, 'a')"]),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert probe.returncode != 0 and "Permission denied" in probe.stderr, probe.stderr
        yield ReadOnlyFile(folder, path, done.id, pending.id, env)
    finally:
        if (folder / "data").exists():
            (folder / "data").chmod(stat.S_IRWXU)


def _perdure(f: ReadOnlyFile, *args: str) -> subprocess.CompletedProcess[str]:
    # The timeout only bounds a hang: a command that retries forever fails the test.
    return subprocess.run(
        _as_reader([*PERDURE, *args]),
        env=f.env,
        cwd=f.folder / "modules",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_read_commands_work_on_a_file_their_user_cannot_write(
    read_only_file: ReadOnlyFile,
) -> None:
    f = read_only_file
    before = f.digest()
    listed = _perdure(f, "runs", "list", "--workflow", "greet", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["id"]: r["status"] for r in json.loads(listed.stdout)["items"]} == {
        f.done: "completed",
        f.pending: "pending",
    }
    shown = _perdure(f, "runs", "show", f.done)
    assert shown.returncode == 0, shown.stderr
    assert "completed" in shown.stdout and "hello" in shown.stdout
    watched = _perdure(f, "runs", "watch", f.done, "--json")
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout.splitlines()[-1])["type"] == "completed"
    through_app = _perdure(f, "--app", "ro_app:app", "runs", "show", f.pending, "--json")
    assert through_app.returncode == 0, through_app.stderr
    assert json.loads(through_app.stdout)["run"]["status"] == "pending"
    for command in (["workflows", "--json"], ["workers", "--json"], ["schedules", "list"]):
        done = _perdure(f, *command)
        assert done.returncode == 0, (command, done.stderr)
    assert f.digest() == before


@pytest.mark.parametrize(
    "command",
    [
        ["worker", "ro_app:app"],
        ["start", "greet", "--input", '"eve"'],
        ["cancel", "RUN"],
        ["migrate"],
    ],
    ids=["worker", "start", "cancel", "migrate"],
)
def test_writing_commands_fail_at_once_with_one_line(
    read_only_file: ReadOnlyFile, command: list[str]
) -> None:
    f = read_only_file
    before = f.digest()
    done = _perdure(f, *[f.pending if part == "RUN" else part for part in command])
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"error: {f.path} is read-only: this command writes to it; use a writable file"
    ], done.stderr
    assert f.digest() == before


def _call(base: str, method: str, path: str, body: Any = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_serve_read_only_serves_pages_and_refuses_changes(read_only_file: ReadOnlyFile) -> None:
    f = read_only_file
    before = f.digest()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        _as_reader([*PERDURE, "serve", "--read-only", "--port", str(port)]),
        env=f.env,
        cwd=f.folder / "modules",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _call(base, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                out = server.stdout.read() if server.stdout else ""
                raise AssertionError(f"perdure serve --read-only did not come up:\n{out}")
            time.sleep(0.05)
        status, body = _call(base, "GET", "/v1/workflows/greet/runs")
        assert status == 200, body
        assert {r["id"] for r in json.loads(body)["items"]} == {f.done, f.pending}
        status, page = _call(base, "GET", f"/runs/{f.pending}")
        assert status == 200
        assert 'id="cancel"' not in page and 'id="read-only"' in page
        refused = [
            ("POST", "/v1/workflows/greet/runs", {"input": "eve"}),
            ("DELETE", f"/v1/workflows/greet/runs/{f.pending}", None),
            ("POST", f"/runs/{f.pending}/cancel", None),
        ]
        for method, path, payload in refused:
            status, body = _call(base, method, path, payload)
            assert status == 403, (path, body)
            assert json.loads(body)["error"]["type"] == "ReadOnly"
        status, body = _call(base, "GET", f"/v1/workflows/greet/runs/{f.pending}")
        assert json.loads(body)["status"] == "pending"
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert f.digest() == before


def _writer_holding_the_wal(f: ReadOnlyFile) -> tuple[App, str]:
    """A writer (root, which file modes do not stop) that keeps the file open with one
    commit still in the -wal; SQLite gives the -wal and -shm the file's mode, 0444."""
    app = App(f"sqlite:///{f.path}", sweep_interval=0)
    handle = app.start("greet", "cy")
    assert Path(f"{f.path}-wal").stat().st_size > 0
    return app, handle.id


def test_a_reader_sees_a_live_writers_commits_through_a_readable_index(
    read_only_file: ReadOnlyFile,
) -> None:
    f = read_only_file
    writer, fresh = _writer_holding_the_wal(f)
    try:
        listed = _perdure(f, "runs", "list", "--workflow", "greet", "--json")
        assert listed.returncode == 0, listed.stderr
        assert fresh in {r["id"] for r in json.loads(listed.stdout)["items"]}
    finally:
        writer.close()


def test_a_wal_that_cannot_be_read_without_its_index_is_refused_clearly(
    read_only_file: ReadOnlyFile,
) -> None:
    f = read_only_file
    writer, _ = _writer_holding_the_wal(f)
    shm = Path(f"{f.path}-shm")
    try:
        shm.chmod(0)
        listed = _perdure(f, "runs", "list")
        assert listed.returncode == 1
        lines = listed.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in listed.stderr, listed.stderr
        assert "holds commits" in lines[0] and "wal_checkpoint(TRUNCATE)" in lines[0]
    finally:
        shm.chmod(0o444)
        writer.close()
