"""What a worker is waiting on, written to its log on SIGUSR1.

A worker that seems stuck (a run it holds stays `running`, it does not stop after
SIGTERM) is asked with ``kill -USR1 <pid>``: every asyncio task of its loop is
logged with the line it awaits, and every thread with its stack.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
import traceback
from types import FrameType

log = logging.getLogger("perdure.worker")

__all__ = ["dump_tasks"]


def dump_tasks() -> None:
    """Log every task of the running loop and every thread, with where each waits."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out.write(f"{len(tasks)} task(s):\n")
    for task in tasks:
        out.write(f"--- task {task.get_name()} ({_state(task)})\n")
        for frame in _await_chain(task.get_coro())[:16]:
            out.write("".join(traceback.format_stack(frame, limit=1)))
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"--- thread {names.get(ident, ident)}\n")
        out.write("".join(traceback.format_stack(frame, limit=8)))
    log.warning("what this worker is waiting on (SIGUSR1):\n%send of the dump", out.getvalue())


def _await_chain(coro: object) -> list[FrameType]:
    """The frames of a suspended coroutine and of what it awaits, outermost first
    (`Task.get_stack` gives only the outermost)."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def _state(task: asyncio.Task[object]) -> str:
    if task.done():
        return "done"
    waiter = getattr(task, "_fut_waiter", None)  # the future the task awaits, if any
    return f"awaiting {waiter!r}"[:200] if waiter is not None else "ready"
