"""The workflow the transactional-step kill trials run (``tests.chaos.txn_workload:app``).

Each step writes one row into the application's ``ledger`` table through the step's
connection, tells the test it is about to commit (one byte on the file descriptor
``TXN_READY_FD``), and lingers a random moment (up to ``TXN_LINGER_MS``) before it
returns, so the test's SIGKILL lands before, during or just after the commit.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import time
from typing import Any

from perdure import App, Context

app = App()  # PERDURE_DATABASE_URL, PERDURE_SCHEMA
_READY_FD = int(os.environ.get("TXN_READY_FD", "-1"))
_LINGER = float(os.environ.get("TXN_LINGER_MS", "3")) / 1000
STEPS = int(os.environ.get("TXN_STEPS", "4"))
_SQLITE = os.environ.get("PERDURE_DATABASE_URL", "").startswith("sqlite")


def _ready() -> None:
    if _READY_FD >= 0:
        try:
            os.write(_READY_FD, b".")
        except OSError:
            pass


@app.workflow
async def txn(ctx: Context, _: None) -> int:
    total = 0
    for i in range(STEPS):
        step = f"t{i}"
        if _SQLITE:
            total += await ctx.step.transaction(step, _sqlite_writer(ctx.run_id, step))
        else:
            total += await ctx.step.transaction(step, _pg_writer(ctx.run_id, step))
    return total


def _sqlite_writer(run_id: str, step: str) -> Any:
    def write(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO ledger (run_id, step) VALUES (?, ?)", (run_id, step))
        _ready()
        time.sleep(random.uniform(0, _LINGER))
        return 1

    return write


def _pg_writer(run_id: str, step: str) -> Any:
    async def write(conn: Any) -> int:
        await conn.execute("INSERT INTO ledger (run_id, step) VALUES (%s, %s)", (run_id, step))
        _ready()
        await asyncio.sleep(random.uniform(0, _LINGER))
        return 1

    return write
