"""A tiny run of the benchmark harness, so it cannot rot. Benchmarks are not tests:
nothing here looks at a figure, only that every workload ran and reported."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_runs_every_workload_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--contenders",
            "perdure-sqlite",
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report, "the harness wrote no results"
    assert "perdure-sqlite" in json.dumps(report)


def test_the_flow_workloads_run_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "flows.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "flows.py"), "--dialect", "sqlite", "--quick",
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert {
        "w1_steps_per_s",
        "f1_tasks_per_s",
        "f2_tasks_per_s",
        "task_over_step",
        "task_over_one_step_run",
    } <= set(report)


def test_the_memory_bench_runs_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "memory.py"), "--dialect", "sqlite", "--quick",
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert {"runs", "parked", "flow_map_fresh", "flow_map_after_runs"} <= set(report)
    assert set(report["parked"]) == {"nap", "waiter"}


def test_the_cpu_meter_counts_this_process() -> None:
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "bench" / "_common.py")
    assert spec is not None and spec.loader is not None
    common = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = common  # its dataclasses look their module up
    spec.loader.exec_module(common)
    meter = common.CpuMeter([])
    meter.start()
    spent = 0
    while spent < 3_000_000:  # burn some CPU in this process (the "client")
        spent += 1
    split = meter.per_run(1)
    assert set(split) == {"client", "workers", "postgres"}
    assert split["client"] > 0
    assert split["workers"] == 0
    assert split["postgres"] >= 0
