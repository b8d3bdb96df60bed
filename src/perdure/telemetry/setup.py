"""Configure OpenTelemetry tracing from the standard ``OTEL_*`` variables, for the
``perdure worker`` and ``perdure serve`` commands.

An application that configures its own tracer provider (or runs under
``opentelemetry-instrument``) needs none of this: perdure uses the global provider.
The commands call `configure_tracing` so that setting, say,
``OTEL_TRACES_EXPORTER=otlp`` and ``OTEL_EXPORTER_OTLP_ENDPOINT`` is enough: with
``opentelemetry-sdk`` installed and no provider configured yet, it installs one
whose resource comes from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` and
whose exporters are the ``OTEL_TRACES_EXPORTER`` names (``otlp`` when only an
endpoint is set), found through the exporters' standard entry points. Sampling and
batching read their own ``OTEL_*`` variables in the SDK.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib.metadata import entry_points

__all__ = ["configure_tracing"]

log = logging.getLogger("perdure")


def configure_tracing(env: Mapping[str, str] | None = None) -> bool:
    """Install a tracer provider from ``OTEL_*`` variables; True if one was installed."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if not names and endpoint:
        names = ["otlp"]
    if not names or names == ["none"]:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* variables are set but opentelemetry-sdk is not installed: no spans")
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # the application configured tracing itself
    provider = TracerProvider()
    for name in names:
        found = entry_points(group="opentelemetry_traces_exporter", name=name)
        if not found:
            log.warning("no OpenTelemetry span exporter named %r is installed", name)
            continue
        exporter = next(iter(found)).load()()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True
