"""A project in one command: `perdure init`, then `perdure worker`, `start`, `runs list`
and `pytest` with no arguments, discovery in a real worker, and `--app` on every
command that takes an app. Real subprocesses on real databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.engine.helpers import wait_for
from tests.server.harness import Http, environment, free_port, server

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PERDURE_DATABASE_URL", "PERDURE_SCHEMA", "PERDURE_APP", "PERDURE_CONFIG"):
        env.pop(name, None)
    env.update(extra)
    return env


def _perdure(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PERDURE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _spawn(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PERDURE, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def _runs(cwd: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    listed = _perdure(cwd, env, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return items


def test_init_then_worker_start_runs_list_and_pytest_work_at_once(
    database: Any, tmp_path: Path
) -> None:
    made = _perdure(tmp_path, _env(), "init", "shop")
    assert made.returncode == 0, made.stderr
    project = tmp_path / "shop"
    assert {"perdure.toml", "workflows", "tests", "conftest.py", "README.md"} <= {
        p.name for p in project.iterdir()
    }
    assert "perdure worker" in (project / "README.md").read_text()
    # SQLite: the config's own database (beside perdure.toml); PostgreSQL: the
    # environment's URL, which wins over the file.
    env = (
        _env()
        if database.kind == "sqlite"
        else _env(PERDURE_DATABASE_URL=database.url, PERDURE_SCHEMA=database.schema)
    )
    worker = _spawn(project, env, "worker")
    try:
        started = _perdure(project, env, "start", "hello", "--input", '"world"')
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.strip()
        done = wait_for(
            lambda: (
                next((r for r in _runs(project, env) if r["id"] == run_id), {}).get("status")
                in ("completed", "failed")
            ),
            60,
        )
        assert done
        [run] = _runs(project, env)
        assert run["status"] == "completed" and run["output"] == "hello world, from perdure"
        listed = _perdure(project / "workflows", env, "runs", "list")  # from a subdirectory
        assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
    finally:
        out = _stop(worker)
    assert "serving hello@1" in out, out
    if database.kind == "sqlite":
        assert (project / "perdure.db").exists()

    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "1 passed" in tested.stdout

    again = _perdure(tmp_path, _env(), "init", "shop")
    assert again.returncode == 2 and "perdure.toml" in again.stderr
    assert "nothing written" in again.stderr


MODULES = {
    "flows/__init__.py": "",
    "flows/app.py": "from perdure import App\n\napp = App()\n",
    "flows/orders.py": """
        from perdure import Context
        from .app import app

        @app.workflow(name="orders.place")
        async def place(ctx: Context, n: int) -> int:
            return await ctx.step.run("double", lambda: n * 2)
    """,
    "flows/billing/__init__.py": "",
    "flows/billing/charge.py": """
        from perdure import Context
        from flows.app import app

        @app.workflow(name="billing.charge")
        async def charge(ctx: Context, n: int) -> int:
            return n
    """,
    "flows/legacy_jobs.py": "raise RuntimeError('an ignored module is never imported')\n",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_worker_with_no_arguments_serves_what_discovery_finds(tmp_path: Path) -> None:
    _write(tmp_path, MODULES)
    (tmp_path / "perdure.toml").write_text(
        'paths = ["flows"]\nignore = ["legacy_*"]\n[worker]\nconcurrency = 3\n'
    )
    env = _env()
    worker = _spawn(tmp_path, env, "worker")
    try:
        workers = wait_for(
            lambda: json.loads(_perdure(tmp_path, env, "workers", "--json").stdout or "[]"), 30
        )
        [found] = workers
        assert sorted(found["workflows"]) == ["billing.charge@1", "orders.place@1"]
        assert found["concurrency"] == 3  # the config's [worker] default
        started = _perdure(tmp_path, env, "start", "orders.place", "--input", "21", "--wait")
        assert started.returncode == 0 and started.stdout.split()[-1] == "42", started.stderr
    finally:
        _stop(worker)


def test_two_apps_or_none_is_a_clear_error_naming_what_was_found(tmp_path: Path) -> None:
    _write(tmp_path, {"two/a.py": "import perdure\napp = perdure.App()\n"})
    _write(tmp_path, {"two/b.py": "import perdure\nother = perdure.App()\n"})
    _write(tmp_path, {"none/c.py": "X = 1\n"})
    env = _env()
    (tmp_path / "perdure.toml").write_text('paths = ["two"]\n')
    two = _perdure(tmp_path, env, "worker")
    assert two.returncode == 1
    assert "found 2 perdure.App" in two.stderr and "two.a:app" in two.stderr, two.stderr
    assert "two.b:other" in two.stderr
    (tmp_path / "perdure.toml").write_text('paths = ["none"]\n')
    none = _perdure(tmp_path, env, "runs", "list")
    assert none.returncode == 1
    assert "found no perdure.App under none" in none.stderr and "none.c" in none.stderr
    assert not (tmp_path / "perdure.db").exists()  # nothing was stored


def test_app_is_taken_as_an_argument_an_option_or_from_the_config(
    database: Any, tmp_path: Path
) -> None:
    env = environment(database, tmp_path)  # rest_app.py: the greet workflow
    with server(env, tmp_path, "--app", "rest_app:app") as http:
        assert http.get("/healthz").status == 200
    clash = _perdure(tmp_path, env, "worker", "rest_app:app", "--app", "other:app")
    assert clash.returncode == 2 and "different apps" in clash.stderr
    missing = _perdure(tmp_path, env, "worker")
    assert missing.returncode == 2 and "no APP" in missing.stderr
    (tmp_path / "perdure.toml").write_text('app = "rest_app:app"\n')
    worker = _spawn(tmp_path, env, "worker", "--lease", "5s")
    try:
        started = _perdure(tmp_path, env, "start", "greet", "--input", '"ada"', "--wait")
        assert started.returncode == 0 and "hi ada" in started.stdout, started.stderr
    finally:
        out = _stop(worker)
    assert "serving" in out and "greet@1" in out, out


def test_serve_with_no_arguments_takes_the_app_host_and_port_from_the_config(
    tmp_path: Path,
) -> None:
    port = free_port()
    (tmp_path / "srv_app.py").write_text("from perdure import App\n\napp = App()\n")
    (tmp_path / "perdure.toml").write_text(
        f'app = "srv_app:app"\ndatabase_url = "sqlite:///served.db"\n[server]\nport = {port}\n'
    )
    proc = _spawn(tmp_path, _env(), "serve")
    http = Http(f"http://127.0.0.1:{port}")

    def answers() -> bool:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            return http.get("/healthz").status == 200
        except OSError:
            return False

    try:
        wait_for(answers, 30)
        started = http.post("/v1/workflows/anything/runs", {"input": 1})
        assert started.status == 201, started.body
    finally:
        _stop(proc)
    assert (tmp_path / "served.db").exists()  # the config's database, beside it
