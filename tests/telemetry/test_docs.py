"""The Grafana dashboard and the alerts of docs/telemetry.md parse and use only the
metric names perdure serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from perdure.telemetry import METRIC_NAMES

DOCS = Path(__file__).resolve().parents[2] / "docs"
_NAME = re.compile(r"\bworkflow_[a-z_]+")


def _names(text: str) -> set[str]:
    """Metric names in PromQL, the histogram suffixes taken off."""
    found = set()
    for name in _NAME.findall(text):
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and name.removesuffix(suffix) in METRIC_NAMES:
                name = name.removesuffix(suffix)
        found.add(name)
    return found


def _exprs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in ("expr", "definition") and isinstance(v, str)]
        for value in node.values():
            found += _exprs(value)
        return found
    if isinstance(node, list):
        return [e for item in node for e in _exprs(item)]
    return []


def test_the_grafana_dashboard_parses_and_uses_only_exported_metrics() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    assert dashboard["title"] and dashboard["panels"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    exprs = _exprs(dashboard)
    used = set().union(*(_names(e) for e in exprs))
    assert used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    assert used == set(METRIC_NAMES)  # every metric has a panel
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["expr"].count("(") == target["expr"].count(")"), target


def test_the_docs_alerts_use_only_exported_metrics() -> None:
    page = (DOCS / "telemetry.md").read_text()
    alerts = re.findall(r"expr: (.+)", page)
    assert len(alerts) == 4
    for expr in alerts:
        assert _names(expr) and _names(expr) <= set(METRIC_NAMES), expr
    assert _names(page) <= set(METRIC_NAMES), _names(page) - set(METRIC_NAMES)
