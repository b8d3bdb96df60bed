"""Telemetry: seed 000's Prometheus metrics and OpenTelemetry spans (docs/telemetry.md).

The engine and the worker call the hooks of `perdure.telemetry.hooks`; the default
does nothing. `enable_metrics` makes this process count (a worker with
``metrics_port`` and the server do it themselves); spans go to the global
OpenTelemetry tracer provider when one is configured. Neither package is imported
until it is needed.
"""

from __future__ import annotations

from .exposition import METRIC_NAMES
from .hooks import NOOP, NOOP_PASS, PassHooks, TelemetryHooks
from .live import current, enable_metrics, metric_store

__all__ = [
    "METRIC_NAMES",
    "NOOP",
    "NOOP_PASS",
    "PassHooks",
    "TelemetryHooks",
    "current",
    "enable_metrics",
    "metric_store",
]
