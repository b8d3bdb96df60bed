"""One log line per thing that happens to a run: every retry, failure, park and
recovery with its reason (logger ``perdure.runs``; WARNING for a run's failure and a
recovery, INFO for a retry that will be retried, parks and releases, DEBUG
otherwise). The record also carries
``run_id``, ``workflow``, ``outcome`` and ``reason`` as fields, which the JSON log
format prints."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ..records import Run

__all__ = ["log_outcome", "log_run"]

log = logging.getLogger("perdure.runs")


def log_run(level: int, run: Run, outcome: str, reason: str) -> None:
    """One line about one run."""
    if not log.isEnabledFor(level):
        return
    log.log(
        level,
        "run %s (%s) %s: %s",
        run.id,
        run.workflow,
        outcome,
        reason,
        extra={"run_id": run.id, "workflow": run.workflow, "outcome": outcome, "reason": reason},
    )


def log_outcome(
    run: Run,
    outcome: str,
    *,
    error: dict[str, Any] | None = None,
    wake_at: datetime | None = None,
    reason: str | None = None,
) -> None:
    """The line for how a pass ended (``outcome`` as in `PassResult`)."""
    cause = f"{(error or {}).get('type')}: {(error or {}).get('message')}"
    when = "an event" if wake_at is None else wake_at.isoformat()
    if outcome == "failed":
        log_run(logging.WARNING, run, "failed", cause)
    elif outcome == "retrying":  # not a failure yet: the run will be tried again
        log_run(
            logging.INFO,
            run,
            "retrying",
            f"attempt {run.attempt} failed ({cause}); next at {when}",
        )
    elif outcome == "parked" and reason is not None and reason.startswith("step "):
        log_run(logging.INFO, run, "step retrying", reason)
    elif outcome == "parked":
        log_run(logging.INFO, run, "parked", f"{reason or 'parked'}; wakes at {when}")
    elif outcome == "cancelled":
        rolled = ", ".join((error or {}).get("compensated") or []) or "none"
        log_run(logging.INFO, run, "cancelled", f"after its rollbacks (rolled back: {rolled})")
    elif outcome == "released":
        log_run(logging.INFO, run, "released", "the worker is stopping; any worker may take it")
    else:
        log_run(logging.DEBUG, run, outcome, "pass ended")
