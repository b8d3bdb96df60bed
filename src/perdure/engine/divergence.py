"""What a diverged pass commits: the run parks (or fails) with a `NonDeterminismError`
that names where the replay left its journal, and a ``replay_diverged`` event.

A diverged run is retried with a backoff (5 s doubling to 5 min, as a run of a
version no worker has): it resumes by itself once a worker's code replays it cleanly.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..records import EventWrite, Fail, Park, Run, Transition

__all__ = ["diverged_outcome"]

_FIRST_DELAY = 5.0
_MAX_DELAY = 300.0


def diverged_outcome(
    run: Run, token: int, detail: dict[str, Any], now: datetime, *, fail: bool
) -> tuple[Transition, datetime | None, str]:
    """The transition of a diverged pass, when the run is tried again (None if it
    fails) and the reason in words. ``detail``: `JournalCursor.divergence`."""
    previous = run.error if isinstance(run.error, dict) else {}
    count = 1
    if previous.get("type") == "NonDeterminismError":
        count = int(previous.get("divergences") or 0) + 1
    message = describe(detail, run.version)
    error = {
        "type": "NonDeterminismError",
        "message": message,
        **detail,
        "worker_version": run.version,
        "divergences": count,
    }
    event = EventWrite("replay_diverged", error)
    if fail:
        return Transition(run.id, token, events=(event,), outcome=Fail(error)), None, message
    delay = min(_MAX_DELAY, _FIRST_DELAY * 2 ** (count - 1))
    wake_at = now + timedelta(seconds=delay)
    park = Park("divergence", wake_at, error=error)
    return Transition(run.id, token, events=(event,), outcome=park), wake_at, message


def describe(detail: dict[str, Any], version: int | None) -> str:
    """The divergence in words."""
    journaled, asked = detail.get("journaled"), detail.get("asked")
    where = f"at step position {detail.get('position')}"
    if journaled is None:
        held = f"the code asked for {_step(asked)}" if asked else "the code asked for nothing"
        theirs = f"{held} but the journal holds nothing more there"
    elif asked is None:
        theirs = f"the journal holds {_step(journaled)} but the code ended without asking for it"
    else:
        theirs = f"the journal holds {_step(journaled)} but the code asked for {_step(asked)}"
    return (
        f"replay diverged {where}: {theirs} (workflow version {version}); the code changed "
        "under a live run: roll the deploy back, give the new code a new version or use "
        "ctx.patched, or retry the run from a step (docs/versioning.md)"
    )


def _step(step: dict[str, Any] | None) -> str:
    if step is None:
        return "nothing"
    return f"{step['kind']} step {step['name']!r}"
