"""The perdure benchmark suite: every contender, every workload, one table.

Usage:
    python bench/run.py [--quick] [--json out.json] [--workloads W1,W2,W2b,W3,W4,W5,W1L,W5L]
        [--contenders perdure-pg,perdure-sqlite,dbos-pg,dbos-sqlite,limit]

Each contender runs in its own subprocess (``--child NAME``), one after the other,
on a fresh dedicated database (``bench_<name>`` on the PostgreSQL server of
``BENCH_DATABASE_URL``, default postgresql://postgres@127.0.0.1:5432/postgres; a
fresh file for SQLite). Workloads are described in /work/shared/bench/WORKLOAD.md
(W1 throughput, W2 latency, W2b step overhead, W3 timers, W4 long journal, W5
backlog, L commit limit). ``--quick`` is a tiny size for smoke tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

ALL = ("perdure-pg", "perdure-sqlite", "dbos-pg", "dbos-sqlite", "limit")
WORKLOADS = ("W1", "W2", "W2b", "W3", "W4", "W5")
#: Flow control (issue 16), only when asked for: W1 with limits declared but not
#: binding, and W5 with a per-key concurrency limit.
LIMIT_WORKLOADS = ("W1L", "W5L")


# ---------------------------------------------------------------------- child side


def run_child(name: str, quick: bool, workloads: set[str]) -> dict[str, Any]:
    from _common import FULL, QUICK

    size = QUICK if quick else FULL
    if name.startswith("perdure-"):
        from _perdure_bench import PerdureBench

        bench = PerdureBench("pg" if name.endswith("pg") else "sqlite", size)
        return asyncio.run(bench.run_all(workloads))
    if name.startswith("dbos-"):
        from _dbos_bench import DbosBench

        return DbosBench("pg" if name.endswith("pg") else "sqlite", size).run_all(workloads)
    if name == "limit":
        from _limit import run_limit

        return run_limit(size)
    raise SystemExit(f"unknown contender {name!r}")


# ---------------------------------------------------------------------- parent side


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    return str(v)


ROWS: list[tuple[str, tuple[str, ...], int]] = [
    ("perdure commit", ("perdure_commit",), 0),
    ("W1 runs/s (best)", ("w1", "best", "runs_per_s"), 0),
    ("W1 steps/s (best)", ("w1", "best", "steps_per_s"), 0),
    ("W1 best concurrency", ("w1", "best", "concurrency"), 0),
    ("W1 commits/step", ("w1", "best", "commits_per_step"), 2),
    ("W1 write tx/step", ("w1", "best", "write_tx_per_step"), 2),
    ("W1 peak busy conns", ("w1", "best", "peak_busy_connections"), 0),
    ("W2 p50 ms", ("w2", "p50"), 2),
    ("W2 p95 ms", ("w2", "p95"), 2),
    ("W2 p99 ms", ("w2", "p99"), 2),
    ("W2b ms/step", ("w2b", "ms_per_step_median"), 2),
    ("W3 late p50 ms", ("w3", "p50"), 1),
    ("W3 late p99 ms", ("w3", "p99"), 1),
    ("W4 total s", ("w4", "seconds"), 2),
    ("W4 ms/step", ("w4", "ms_per_step"), 2),
    ("W4 / W2b", ("w4", "ratio_to_w2b"), 2),
    ("W5 runs/s", ("w5", "runs_per_s"), 0),
    ("W5 / W1 runs/s", ("w5", "ratio_to_w1"), 2),
    ("W1L steps/s (limits, not binding)", ("w1_limits", "steps_per_s"), 0),
    ("W1L / W1", ("w1_limits", "ratio_to_w1"), 2),
    ("W5L runs/s (per-key limit)", ("w5_limits", "runs_per_s"), 0),
    ("W5L / W5", ("w5_limits", "ratio_to_w5"), 2),
]


def table(results: dict[str, Any]) -> str:
    names = [n for n in results if n != "limit"]
    lines = ["| figure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, path, digits in ROWS:
        cells = [_fmt(_get(results[n], *path), digits) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    limit = results.get("limit")
    if limit and "tps" in limit:
        lines.append("")
        lines.append("| L connections | " + " | ".join(str(c) for c in limit["tps"]) + " |")
        lines.append("|---" * (len(limit["tps"]) + 1) + "|")
        lines.append(
            "| L tps (1-row INSERT per tx) | "
            + " | ".join(f"{v:,.0f}" for v in limit["tps"].values())
            + " |"
        )
    return "\n".join(lines)


def _limit_at(limit: dict[str, Any] | None, conns: int | None) -> tuple[int, float] | None:
    if not limit or "tps" not in limit:
        return None
    levels = sorted(int(c) for c in limit["tps"])
    want = max(1, conns or 1)
    level = next((c for c in levels if c >= want), levels[-1])
    return level, float(limit["tps"][str(level)])


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets: (name, value, bar, met, factor)."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, bar: float | None, higher: bool, note: str) -> None:
        if value is None or bar is None or bar == 0:
            out.append({"target": name, "met": None, "note": note + " (not measured)"})
            return
        factor = value / bar
        met = factor >= 1.0 if higher else factor <= 1.0
        out.append(
            {
                "target": name,
                "value": value,
                "bar": bar,
                "factor": factor,
                "met": met,
                "note": note,
            }
        )

    sw = results.get("perdure-pg", {})
    sq = results.get("perdure-sqlite", {})
    db = results.get("dbos-pg", {})
    lim = results.get("limit")
    s1 = _get(sw, "w1", "best", "steps_per_s")
    d1 = _get(db, "w1", "best", "steps_per_s")
    add(
        "W1 steps/s PG ≥ 2x DBOS",
        s1,
        None if d1 is None else 2 * d1,
        True,
        f"perdure {_fmt(s1)} vs 2xDBOS {_fmt(None if d1 is None else 2 * d1)}",
    )
    busy = _get(sw, "w1", "best", "peak_busy_connections")
    at = _limit_at(lim, busy)
    add(
        "W1 steps/s PG ≥ 0.5x L (same connections)",
        s1,
        None if at is None else 0.5 * at[1],
        True,
        "" if at is None else f"L at {at[0]} conn = {at[1]:,.0f} tps (peak busy conns {busy})",
    )
    at1 = _limit_at(lim, 1)
    add(
        "W1 steps/s PG ≥ 0.5x L at 1 connection",
        s1,
        None if at1 is None else 0.5 * at1[1],
        True,
        "" if at1 is None else f"L at 1 conn = {at1[1]:,.0f} tps",
    )
    c = _get(sw, "w1", "best", "commits_per_step")
    add(
        "commits/step ≤ 1.0",
        c,
        1.0,
        False,
        f"DBOS: {_fmt(_get(db, 'w1', 'best', 'commits_per_step'), 2)}",
    )
    s2, d2 = _get(sw, "w2", "p50"), _get(db, "w2", "p50")
    add("W2 p50 ≤ 0.5x DBOS", s2, None if d2 is None else 0.5 * d2, False, f"DBOS {_fmt(d2, 2)} ms")
    s3, d3 = _get(sw, "w3", "p99"), _get(db, "w3", "p99")
    add("W3 p99 ≤ 0.5x DBOS", s3, None if d3 is None else 0.5 * d3, False, f"DBOS {_fmt(d3)} ms")
    add("W4 / W2b ≤ 1.5", _get(sw, "w4", "ratio_to_w2b"), 1.5, False, "perdure PG")
    add("W5 / W1 ≥ 0.8", _get(sw, "w5", "ratio_to_w1"), 0.8, True, "perdure PG")
    q1 = _get(sq, "w1", "best", "steps_per_s")
    add(
        "SQLite W1 ≥ 0.5x PG W1",
        q1,
        None if s1 is None else 0.5 * s1,
        True,
        "single worker process",
    )
    return out


def targets_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| target | value | bar | factor | met | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        met = "—" if r["met"] is None else ("met" if r["met"] else "MISSED")
        lines.append(
            f"| {r['target']} | {_fmt(r.get('value'), 2)} | {_fmt(r.get('bar'), 2)} | "
            f"{_fmt(r.get('factor'), 2)} | {met} | {r['note']} |"
        )
    return "\n".join(lines)


def _git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", HERE, "status", "--porcelain", "--", "../src"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + ("+dirty-src" if dirty else "")


def environment() -> dict[str, Any]:
    from _common import pg_settings

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/meminfo") as f:
            env["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        env["postgres"] = pg_settings()
    except Exception as exc:
        env["postgres"] = f"unavailable: {exc}"
    env["perdure_commit"] = _git_head()
    try:
        from importlib.metadata import version

        env["dbos"] = version("dbos")
    except Exception:
        env["dbos"] = None
    return env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--contenders", default=",".join(ALL))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument(
        "--merge",
        default=None,
        help="comma-separated JSON files of earlier invocations to merge (later ones win,\n"
        "per contender and workload) before this invocation's results",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    workloads = {w.strip() for w in args.workloads.split(",") if w.strip()}

    if args.child:
        commit = _git_head()
        result = run_child(args.child, args.quick, workloads)
        result["perdure_commit"] = commit
        result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with open(args.child_out, "w") as f:
            json.dump(result, f, indent=1, default=str)
        return

    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for c in contenders:
        if c not in ALL:
            raise SystemExit(f"unknown contender {c!r}; choose from {', '.join(ALL)}")
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for path in (args.merge or "").split(","):
        if path.strip():
            with open(path.strip()) as f:
                old = json.load(f)
            for name, res in old["results"].items():
                if "error" not in res:
                    results.setdefault(name, {}).update(res)
            timings.update(old.get("seconds", {}))
    for name in contenders:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out_path = tmp.name
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--child-out", out_path]
        cmd += ["--workloads", ",".join(sorted(workloads))]
        if args.quick:
            cmd.append("--quick")
        print(f"== {name} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, check=False)
        timings[name] = time.perf_counter() - t
        if proc.returncode != 0:
            results.setdefault(name, {})["error"] = f"exit code {proc.returncode}"
            print(f"== {name} FAILED ({proc.returncode})", file=sys.stderr, flush=True)
            continue
        with open(out_path) as f:
            results.setdefault(name, {}).pop("error", None)
            results[name].update(json.load(f))
        os.unlink(out_path)
        print(f"== {name} done in {timings[name]:.1f}s", file=sys.stderr, flush=True)

    for res in results.values():
        w1 = _get(res, "w1", "best", "runs_per_s")
        w5 = _get(res, "w5", "runs_per_s")
        if w1 and w5 and isinstance(res.get("w5"), dict):
            res["w5"]["ratio_to_w1"] = w5 / w1

    env = environment()
    rows = targets(results)
    print()
    print(
        f"machine: {env.get('nproc')} cores, {env.get('mem_total')}; python {env['python']}; "
        f"postgres {env.get('postgres')}; perdure {env.get('perdure_commit')}; "
        f"dbos {env.get('dbos')}"
    )
    print()
    print(table(results))
    print()
    print(targets_table(rows))
    for name, res in results.items():
        if "error" in res:
            print(f"\n{name}: {res['error']}")
        elif "note" in res:
            print(f"\n{name}: {res['note']}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(
                {
                    "environment": env,
                    "quick": args.quick,
                    "results": results,
                    "targets": rows,
                    "seconds": timings,
                },
                f,
                indent=1,
                default=str,
            )


if __name__ == "__main__":
    main()
