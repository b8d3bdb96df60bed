"""L: the commit-rate ceiling of the PostgreSQL server.

pgbench, one INSERT of a ~200-byte row per transaction, at 1, 2, 4, 8 and 16
connections (``-c N -j min(N, cores)``), each for ``l_seconds``, on a fresh
database ``bench_limit``. Falls back to a psycopg insert loop without pgbench.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

import psycopg
from _common import Size, drop_database, fresh_database

LEVELS = (1, 2, 4, 8, 16)
ROW = "x" * 200


def _psycopg_loop(url: str, conns: int, seconds: int) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * conns

    def loop(i: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while time.monotonic() < stop:
                conn.execute("INSERT INTO l_rows (payload) VALUES (%s)", (ROW,))
                counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def run_limit(size: Size, levels: tuple[int, ...] = LEVELS) -> dict[str, Any]:
    """The server's commit rate (one-row insert transactions per second) at each
    number of connections in ``levels``."""
    url = fresh_database("bench_limit")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE l_rows (id bigserial PRIMARY KEY, payload text NOT NULL)")
    pgbench = shutil.which("pgbench")
    tps: dict[str, float] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"INSERT INTO l_rows (payload) VALUES ('{ROW}');\n")
    cores = os.cpu_count() or 1
    for conns in levels:
        if pgbench:
            proc = subprocess.run(
                [
                    pgbench,
                    "-n",
                    "-f",
                    script.name,
                    "-c",
                    str(conns),
                    "-j",
                    str(min(conns, cores)),
                    "-T",
                    str(size.l_seconds),
                    url,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            match = re.search(r"tps = ([0-9.]+)", proc.stdout)
            assert match, proc.stdout
            tps[str(conns)] = float(match.group(1))
        else:
            tps[str(conns)] = _psycopg_loop(url, conns, size.l_seconds)
    os.unlink(script.name)
    drop_database("bench_limit")
    return {
        "tps": tps,
        "tool": "pgbench" if pgbench else "psycopg loop",
        "seconds_per_level": size.l_seconds,
        "row_bytes": len(ROW),
    }
