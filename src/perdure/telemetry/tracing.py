"""OpenTelemetry, imported lazily: the tracer when a provider is configured, and the
W3C ``traceparent`` that carries a caller's trace context to the run it starts.

Nothing here imports ``opentelemetry`` before it is needed, and when the package is
absent every function answers None: tracing then costs nothing. The tracer comes from
the global tracer provider, so whatever configured it (the application, or
``opentelemetry-instrument`` with the standard ``OTEL_*`` variables) decides where
spans go; `perdure.telemetry.setup` configures one from those variables for the
``perdure`` commands.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic
from typing import Any

__all__ = [
    "available",
    "current_traceparent",
    "parent_context",
    "refresh",
    "remote_parent",
    "tracer",
]

_TRACER_NAME = "perdure"
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

_trace: Any = None  # the opentelemetry.trace module; False once known to be absent
_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer or None)
_checked_at = -1e9  # monotonic time of the last provider lookup
_RECHECK = 1.0


def _api() -> Any:
    global _trace
    if _trace is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _trace = False
        else:
            _trace = trace
    return _trace or None


def available() -> bool:
    """True when the OpenTelemetry API is installed."""
    return _api() is not None


def tracer() -> Any:
    """perdure's tracer from the global provider, or None when there is no API or no
    provider was configured (spans would go nowhere: none are made).

    Called once per pass: the provider is looked up again at most once a second (its
    lookup reads the environment), so one configured after the worker started is
    still picked up."""
    global _cached, _checked_at
    now = monotonic()
    if now - _checked_at < _RECHECK:
        return _cached[1]
    trace = _api()
    if trace is None:
        return None
    _checked_at = now
    provider = trace.get_tracer_provider()
    if provider is _cached[0]:
        return _cached[1]
    found = None
    if not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        from .._version import __version__

        found = provider.get_tracer(_TRACER_NAME, __version__)
    _cached = (provider, found)
    return found


def refresh() -> None:
    """Look the global tracer provider up again at the next pass (after configuring
    one, when spans must start at once)."""
    global _checked_at
    _checked_at = -1e9


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span active in the caller's context, if any."""
    trace = _api()
    if trace is None:
        return None
    return traceparent_of(trace.get_current_span().get_span_context())


def traceparent_of(context: Any) -> str | None:
    """The W3C ``traceparent`` of an OpenTelemetry span context (None if invalid)."""
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parent_context(traceparent: str | None) -> Any:
    """An OpenTelemetry context whose parent is the remote span ``traceparent`` names
    (None, also for a malformed value: the span starts a trace of its own)."""
    trace = _api()
    if trace is None or traceparent is None:
        return None
    found = _TRACEPARENT.fullmatch(traceparent)
    if found is None:
        return None
    trace_id, span_id, flags = (int(part, 16) for part in found.groups())
    if not trace_id or not span_id:
        return None
    span_context = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def is_traceparent(value: object) -> bool:
    """True for a well-formed W3C ``traceparent`` (version 00)."""
    return isinstance(value, str) and _TRACEPARENT.fullmatch(value) is not None


@contextmanager
def remote_parent(traceparent: str | None) -> Iterator[None]:
    """Inside: the span ``traceparent`` names (a request's W3C header) is the current
    context, unless a span is current already (instrumentation extracted it)."""
    trace = _api()
    context = None if trace is None else parent_context(traceparent)
    if context is None or trace.get_current_span().get_span_context().is_valid:
        yield
        return
    from opentelemetry import context as contexts

    token = contexts.attach(context)
    try:
        yield
    finally:
        contexts.detach(token)
