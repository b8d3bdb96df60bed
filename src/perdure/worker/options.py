"""A worker's options, checked at the edge (`perdure.Worker`, `App.worker`, the CLI):
a bad value raises `ValidationError` before anything starts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..durations import Duration, to_seconds
from ..errors import ValidationError
from ..names import validate_pattern
from ..telemetry.exposition import require as require_metrics
from ..validation import check_int

__all__ = ["WorkerOptions", "check_options"]


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """The checked options, in seconds where they are durations."""

    concurrency: int
    patterns: tuple[str, ...] | None
    lease: float
    poll_interval: float | None
    shutdown_timeout: float
    metrics_at: tuple[str, int] | None  # (host, port) of the metrics endpoint


def check_options(
    *,
    concurrency: int,
    workflows: Iterable[str] | str | None,
    lease: Duration,
    poll_interval: Duration | None,
    shutdown_timeout: Duration | None,
    metrics_port: int | None,
    metrics_host: str,
) -> WorkerOptions:
    """The options of `perdure.Worker`, checked (see its docstring)."""
    check_int(concurrency, "concurrency", minimum=1)
    if metrics_port is not None:
        check_int(metrics_port, "metrics_port", minimum=0)
        if metrics_port > 65535:
            raise ValidationError(f"metrics_port must be at most 65535, got {metrics_port}")
        if not isinstance(metrics_host, str) or not metrics_host:
            raise ValidationError(f"metrics_host must be an address, got {metrics_host!r:.80}")
        require_metrics()  # a clear error now, not at the first scrape
    if isinstance(workflows, str):
        workflows = [workflows]
    patterns = (
        None
        if workflows is None
        else tuple(validate_pattern(p, what="workflow pattern") for p in workflows)
    )
    lease_s = to_seconds(lease, what="lease")
    if lease_s < 0.1:
        raise ValidationError(f"lease must be at least 100ms, got {lease!r}")
    poll_s = None if poll_interval is None else to_seconds(poll_interval, what="poll_interval")
    if poll_s is not None and not 0 < poll_s <= 3600:
        raise ValidationError(
            f"poll_interval must be more than 0 and at most an hour, got {poll_interval!r}"
        )
    shutdown_s = lease_s
    if shutdown_timeout is not None:
        shutdown_s = to_seconds(shutdown_timeout, what="shutdown_timeout")
    return WorkerOptions(
        concurrency=concurrency,
        patterns=patterns,
        lease=lease_s,
        poll_interval=poll_s,
        shutdown_timeout=shutdown_s,
        metrics_at=None if metrics_port is None else (metrics_host, metrics_port),
    )
