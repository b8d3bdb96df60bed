"""`perdure worker` / `perdure serve` configure tracing from the standard OTEL_*
variables when the application did not (a real subprocess each: the global tracer
provider can be set once per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    from opentelemetry import trace
    from perdure.telemetry.setup import configure_tracing

    installed = configure_tracing()
    provider = trace.get_tracer_provider()
    print(installed, type(provider).__name__)
    if installed:
        with trace.get_tracer("t").start_as_current_span("hello"):
            pass
        provider.shutdown()
    """
)


def _run(env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
        check=True,
    )
    return result.stdout


def test_otel_traces_exporter_console_installs_a_provider_that_exports() -> None:
    out = _run({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "orders-worker"})
    assert out.startswith("True TracerProvider"), out
    assert '"name": "hello"' in out and '"service.name": "orders-worker"' in out, out


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"},
    ],
)
def test_without_otel_variables_nothing_is_installed(env: dict[str, str]) -> None:
    assert _run(env).startswith("False ProxyTracerProvider")
