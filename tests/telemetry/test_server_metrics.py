"""``perdure serve``: its ``/metrics`` has every metric name, counts the signals it
delivered, and its own retention sweeper deletes expired runs (no worker running)."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from perdure.telemetry import METRIC_NAMES
from tests.server.harness import environment, server

RUNS = "/v1/workflows/{}/runs"


def _scrape(base: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, {})
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_the_server_serves_metrics_counts_signals_and_sweeps(database: Any, tmp_path: Path) -> None:
    env = environment(database, tmp_path, PERDURE_SWEEP_INTERVAL="1")
    with server(env, tmp_path) as http:
        doomed = [
            http.post(RUNS.format("greet"), {"input": "x", "retentionDays": 0}).body["runId"]
            for _ in range(2)
        ]
        for run_id in doomed:
            assert http.delete(f"{RUNS.format('greet')}/{run_id}").status == 200
        live = http.post(RUNS.format("greet"), {"input": "y", "retentionDays": 0}).body["runId"]
        waiting = http.post(RUNS.format("approval"), {"input": {"order": 1}}).body["runId"]
        sent = http.post(f"{RUNS.format('approval')}/{waiting}/signals/approve", {"ok": True})
        assert sent.status == 200

        deadline = time.monotonic() + 30
        while True:
            metrics = _scrape(http.base)
            if metrics["workflow_retention_swept_total"] == {(): 2.0}:
                break
            assert time.monotonic() < deadline, metrics["workflow_retention_swept_total"]
            time.sleep(0.05)
        for run_id in doomed:
            assert http.get(f"{RUNS.format('greet')}/{run_id}").status == 404
        assert http.get(f"{RUNS.format('greet')}/{live}").status == 200

    for name in METRIC_NAMES:
        assert name.removesuffix("_total") in metrics, name
    assert metrics["workflow_runs_completed_total"] == {
        (("status", "cancelled"), ("workflow", "greet")): 2.0
    }
    assert metrics["workflow_signals_total"] == {
        (("event", "approve"), ("workflow", "approval")): 1.0
    }
    assert metrics["workflow_queue_depth"] == {
        (("workflow", "approval"),): 1.0,
        (("workflow", "greet"),): 1.0,
    }
    assert metrics["workflow_runs_in_flight"] == {  # no worker: each one pending
        (("state", state), ("workflow", name)): 1.0 if state == "pending" else 0.0
        for name in ("approval", "greet")
        for state in ("pending", "running", "waiting")
    }
    lags = metrics["workflow_claim_lag_seconds"]
    assert set(lags) == {(("workflow", "approval"),), (("workflow", "greet"),)}
    assert all(lag >= 0 for lag in lags.values())
