"""The operations section of the contract: retry and fork. Every function runs on the
backend's thread with a `Session`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import RunNotFound, RunStateError, ValidationError
from ...records import Run, Step
from ._convert import to_run, to_step
from ._flow_recovery import fork_flow, retry_flow
from ._flows import is_flow_run
from ._rows import add_event
from ._session import QUERIES, Session

__all__ = ["fork_run", "get_steps_with_superseded", "retry_run"]

_ENDED_FOR_RETRY = ("failed", "cancelled")


def retry_run(s: Session, run_id: str, from_step: str | None, by: str) -> Run:
    """See `Backend.retry_run`."""
    with s.write() as now:
        run = retry_in(s, run_id, from_step, by, now)
        s.notify("wake", run_id)
        return run


def retry_in(s: Session, run_id: str, from_step: str | None, by: str, now: float) -> Run:
    """Retry a run inside the caller's transaction (a parent's retry reaches its ended
    children through it)."""
    row = s.one(QUERIES["get_run"], {"id": run_id})
    if row is None:
        raise RunNotFound(run_id)
    diverged = row["status"] == "waiting" and row["wake_reason"] == "divergence"
    if row["status"] not in _ENDED_FOR_RETRY and not diverged:
        raise RunStateError(
            f"run {run_id} is {row['status']}: only a failed or cancelled run can be retried"
        )
    if is_flow_run(s, run_id):
        return retry_flow(s, row, from_step, by, now)
    from_seq = _seq(s, run_id, from_step) if from_step is not None else _first_failed(s, run_id)
    params: dict[str, Any] = {"run_id": run_id, "from_seq": from_seq}
    kept = s.all(QUERIES["supersede_steps"], {**params, "attempt": row["attempt"], "now": now})
    s.run(QUERIES["cut_call_order"], {"id": run_id, "from_seq": from_seq})
    s.run(QUERIES["delete_superseded"], params)
    if diverged:  # the replay registers the waits it reaches again
        s.run(QUERIES["drop_waits"], {"run_id": run_id})
    reset = s.one(QUERIES["reset_for_retry"], {"id": run_id, "now": now})
    assert reset is not None  # the row is locked by this transaction
    run = to_run(reset)
    superseded = [r["key"] for r in sorted(kept, key=lambda r: r["seq"])]
    data = {"from_step": from_step, "superseded": superseded, "by": by, "attempt": run.attempt}
    add_event(s, run_id, "retried", data, now)
    return run


def fork_run(
    s: Session,
    source_id: str,
    new_id: str,
    before_step: str | None,
    input_json: str | None,
    version: int | None,
    by: str,
) -> Run:
    """See `Backend.fork_run`."""
    with s.write() as now:
        source = s.one(QUERIES["get_run"], {"id": source_id})
        if source is None:
            raise RunNotFound(source_id)
        if is_flow_run(s, source_id):
            asked = (new_id, before_step, input_json, version, by)
            return fork_flow(s, source, asked, now)
        before = None if before_step is None else _seq(s, source_id, before_step)
        keys = s.one(QUERIES["run_keys"], {"id": source_id})
        assert keys is not None
        row = s.one(
            QUERIES["insert_run"],
            {
                "id": new_id,
                "workflow": source["workflow"],
                "version": source["version"] if version is None else version,
                "input": source["input"] if input_json is None else input_json,
                "priority": source["priority"],
                "idempotency_key": None,
                "parent_id": None,
                "parent_step": None,
                "available_at": now,
                "deadline_at": None,
                "retention_days": source["retention_days"],
                "now": now,
                "traceparent": None,
                # A fork keeps its source's flow-control keys (not its debounce key).
                "concurrency_key": keys["concurrency_key"],
                "fifo_key": keys["fifo_key"],
                "rate_key": keys["rate_key"],
                "debounce_key": None,
            },
        )
        if row is None:
            raise ValidationError(f"run id {new_id!r} is taken")
        s.run(
            QUERIES["copy_journal"],
            {"new_id": new_id, "source_id": source_id, "before_seq": before, "now": now},
        )
        data = {
            "workflow": row["workflow"],
            "version": row["version"],
            "forked_from": source_id,
            "from_step": before_step,
            "by": by,
        }
        add_event(s, new_id, "created", {k: v for k, v in data.items() if v is not None}, now)
        s.notify("wake", new_id)
        return to_run(row)


def get_steps_with_superseded(s: Session, run_id: str) -> list[Step]:
    """The journal and the superseded rows, in the order they were written."""
    rows = s.all(QUERIES["get_steps_with_superseded"], {"run_id": run_id})
    return [_marked(to_step(r), bool(r["superseded"])) for r in rows]


def _marked(step: Step, superseded: bool) -> Step:
    return replace(step, superseded=superseded)


def _seq(s: Session, run_id: str, key: str) -> int:
    row = s.one(QUERIES["step_seq"], {"run_id": run_id, "key": key})
    if row is None:
        raise ValidationError(f"run {run_id} has no step {key!r}")
    return int(row["seq"])


def _first_failed(s: Session, run_id: str) -> int | None:
    row = s.one(QUERIES["first_failed_seq"], {"run_id": run_id})
    return None if row is None or row["seq"] is None else int(row["seq"])
