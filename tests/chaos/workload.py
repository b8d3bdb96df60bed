"""The workflow the chaos worker processes run (``tests.chaos.workload:app``).

One workflow, ``chaos``: three ``ctx.step.run`` steps (``a``, ``b``, ``c``), a durable
``ctx.step.sleep`` (``nap``) and, unless the input says ``"wait": false``, a
``ctx.step.wait_for_event`` (``go``) that the harness resolves with a signal. Every
execution of a step body appends one line to a per-process side-effect log in
``$CHAOS_EFFECTS_DIR`` (``run_id<TAB>key<TAB>token``, one ``O_APPEND`` write, so a
SIGKILL never leaves half a line), and returns that token: re-executions are
countable, and the journal's value can be matched to the execution that produced it.

The input (a dict) steers faults:

* ``work``: seconds each step body sleeps (default 0.02);
* ``sleep``: the nap's duration (default ``"300ms"``);
* ``wait``: include the ``go`` wait (default True);
* ``hang``: a step key (or a list of keys) whose *first* execution (per run) sleeps
  ``hang_for`` seconds
  (default 60) after recording its side effect: the window for a SIGKILL or SIGSTOP;
* ``exit``: a step key whose body calls ``os._exit(1)`` every time, after its
  ``work`` (a poison run);
* ``freeze``: a step key whose *first* execution SIGSTOPs its own process once the
  body is done, before its result is committed (a zombie holding a result).
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from perdure import App, Context

RUN_STEPS = ("a", "b", "c")
WORKFLOW = "chaos"

_lock = threading.Lock()
_fd: int | None = None
_fd_pid = 0
_counter = itertools.count(1)


def effects_dir() -> Path:
    return Path(os.environ.get("CHAOS_EFFECTS_DIR") or ".")


def journal_keys(spec: dict[str, Any]) -> tuple[str, ...]:
    """The journal keys one completed run of ``spec`` has, in order."""
    keys = ["a", "b", "nap"]
    if spec.get("wait", True):
        keys.append("go")
    keys.append("c")
    return tuple(keys)


def _record(run_id: str, key: str) -> str:
    global _fd, _fd_pid
    with _lock:
        pid = os.getpid()
        if _fd is None or _fd_pid != pid:
            directory = effects_dir()
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"effects-{pid}.log"
            _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _fd_pid = pid
        token = f"{pid}-{next(_counter)}"
        os.write(_fd, f"{run_id}\t{key}\t{token}\n".encode())
    return token


def _first_execution(run_id: str, key: str) -> bool:
    """True exactly once per (run, key) across processes (an exclusive-create marker)."""
    marker = effects_dir() / f"first-{run_id}-{key}"
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


def _listed(value: Any, key: str) -> bool:
    return value == key or (isinstance(value, list) and key in value)


def effect(run_id: str, key: str, spec: dict[str, Any]) -> str:
    """A step body: record the side effect, then do the configured work or fault."""
    token = _record(run_id, key)
    if _listed(spec.get("hang"), key) and _first_execution(run_id, key):
        time.sleep(float(spec.get("hang_for", 60)))
    work = float(spec.get("work", 0.02))
    if work > 0:
        time.sleep(work)
    if spec.get("exit") == key:
        os._exit(1)
    if spec.get("freeze") == key and _first_execution(run_id, f"{key}.freeze"):
        os.kill(os.getpid(), signal.SIGSTOP)  # the whole process stops, result in hand
    return token


def register(app: App) -> App:
    """Register the chaos workflow on ``app`` (workers and the harness share it)."""

    @app.workflow(name=WORKFLOW)
    async def chaos(ctx: Context, spec: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["a"] = await ctx.step.run("a", functools.partial(effect, ctx.run_id, "a", spec))
        out["b"] = await ctx.step.run("b", functools.partial(effect, ctx.run_id, "b", spec))
        await ctx.step.sleep("nap", spec.get("sleep", "300ms"))
        if spec.get("wait", True):
            out["go"] = await ctx.step.wait_for_event("go", event="go")
        out["c"] = await ctx.step.run("c", functools.partial(effect, ctx.run_id, "c", spec))
        return out

    return app


app = register(App())
