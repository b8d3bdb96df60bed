"""The metric store: bounded label values, Prometheus histogram semantics, and the
text format it renders to."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from perdure.records import QueueGauge
from perdure.telemetry.exposition import METRIC_NAMES, render
from perdure.telemetry.metrics import MAX_LABEL_VALUES, OTHER, MetricStore


def test_step_and_event_names_beyond_the_bound_are_counted_as_other() -> None:
    wf = MetricStore().workflow("wf")
    for i in range(MAX_LABEL_VALUES + 20):
        wf.step(f"s{i}").observe(0.1)
        wf.count(wf.signals, f"e{i}")
    assert len(wf.steps) == MAX_LABEL_VALUES + 1
    assert sum(wf.steps[OTHER].counts) == 20
    assert wf.signals[OTHER] == 20
    wf.count(wf.signals, "e0")  # a known name keeps its own series
    assert wf.signals["e0"] == 2


def test_the_text_format_has_cumulative_buckets_every_name_and_zero_gauges() -> None:
    store = MetricStore()
    wf = store.workflow("billing")
    for value in (0.001, 0.002, 0.002, 7.0, 1e9):  # le is inclusive; 1e9 is only in +Inf
        wf.step("charge").observe(value)
    wf.started = 3
    wf.count(wf.completed, "failed")
    wf.run_duration.observe(2.0)
    store.swept = 4
    gauges = [QueueGauge("billing", 2, 5, 1.5, 4, 3)]
    text = render(store, gauges, ["billing", "idle"]).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {f"{n.removesuffix('_total')}" for n in METRIC_NAMES} <= set(families)
    buckets = {
        s.labels["le"]: s.value
        for s in families["workflow_step_duration_seconds"].samples
        if s.name.endswith("_bucket")
    }
    assert buckets["0.001"] == 1 and buckets["0.0025"] == 3 and buckets["5.0"] == 3
    assert buckets["10.0"] == 4 and buckets["+Inf"] == 5
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values()
              for s in f.samples}  # fmt: skip
    assert values[("workflow_runs_started_total", (("workflow", "billing"),))] == 3
    assert values[("workflow_retention_swept_total", ())] == 4
    assert values[("workflow_queue_depth", (("workflow", "billing"),))] == 5
    in_flight = "workflow_runs_in_flight"
    assert values[(in_flight, (("state", "running"), ("workflow", "billing")))] == 2
    assert values[(in_flight, (("state", "pending"), ("workflow", "billing")))] == 4
    assert values[(in_flight, (("state", "waiting"), ("workflow", "billing")))] == 3
    assert values[(in_flight, (("state", "waiting"), ("workflow", "idle")))] == 0
    assert values[("workflow_claim_lag_seconds", (("workflow", "billing"),))] == 1.5
    assert values[("workflow_queue_depth", (("workflow", "idle"),))] == 0
    # Without the database, the gauges are left out rather than reported as zero.
    text = render(store, None, ["billing"]).decode()
    assert "workflow_queue_depth" not in text and "workflow_runs_started_total" in text
