"""Writes shared by the producer and worker transactions: runs, journal rows, events,
wake-ups, child results and cancellation. Every function runs on the backend's thread
with a `Session` inside its transaction."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ...records import (
    ACTIVE_STATUSES,
    NewRun,
    Step,
)
from ._convert import dumps, micro, to_step, to_ts
from ._session import QUERIES, Session

__all__ = [
    "add_event",
    "cancel_descendants",
    "cancel_ids",
    "drop_sibling_waits",
    "insert_run",
    "resolve_wait",
    "wake",
    "write_child_result",
    "write_step",
]


def add_event(s: Session, run_id: str, type_: str, data: Any, now: float) -> None:
    s.run(
        QUERIES["insert_event"],
        {"run_id": run_id, "type": type_, "data": dumps(data), "now": now},
    )


def insert_run(
    s: Session,
    new: NewRun,
    now: float,
    *,
    parent_id: str | None,
    extra: dict[str, Any] | None = None,
) -> sqlite3.Row | None:
    """Insert a pending run and its ``created`` event; None if the id or the
    (workflow, idempotency key) already exists."""
    available_at = to_ts(new.run_at) if new.run_at is not None else micro(now + new.delay)
    if new.deadline_at is not None:
        deadline_at: float | None = to_ts(new.deadline_at)
    elif new.deadline_in is not None:
        deadline_at = micro(now + new.deadline_in)
    else:
        deadline_at = None
    row = s.one(
        QUERIES["insert_run"],
        {
            "id": new.id,
            "workflow": new.workflow,
            "version": new.version,
            "input": new.input_json,
            "priority": new.priority,
            "idempotency_key": new.idempotency_key,
            "parent_id": parent_id,
            "parent_step": new.parent_step,
            "available_at": available_at,
            "deadline_at": deadline_at,
            "retention_days": new.retention_days,
            "now": now,
            "traceparent": new.traceparent,
            "concurrency_key": new.concurrency_key,
            "fifo_key": new.fifo_key,
            "rate_key": new.rate_key,
            "debounce_key": new.debounce_key,
        },
    )
    if row is not None:
        data: dict[str, Any] = {"workflow": new.workflow, "version": new.version}
        if parent_id is not None:
            data["parent_id"] = parent_id
            data["parent_step"] = new.parent_step
        if extra:
            data.update(extra)
        add_event(s, new.id, "created", data, now)
    return row


def write_step(
    s: Session,
    run_id: str,
    key: str,
    kind: str,
    status: str,
    now: float,
    *,
    output_json: str | None = None,
    error: dict[str, Any] | None = None,
    attempts: int = 1,
    started_at: float | None = None,
    completed_at: float | None = None,
) -> Step | None:
    """Upsert a journal row and drop the run's wait on the key. Returns the stored row
    when a completed or failed one already held the key (it wins), else None."""
    changed = s.run(
        QUERIES["upsert_step"],
        {
            "run_id": run_id,
            "key": key,
            "kind": kind,
            "status": status,
            "output": output_json,
            "error": dumps(error),
            "attempts": attempts,
            "started_at": started_at,
            "completed_at": now if completed_at is None else completed_at,
            "now": now,
        },
    )
    s.run(QUERIES["delete_wait"], {"run_id": run_id, "key": key})
    if changed:
        return None
    row = s.one(QUERIES["get_step"], {"run_id": run_id, "key": key})
    return None if row is None else to_step(row)


def wake(s: Session, run_id: str, now: float) -> bool:
    """Make a pending/waiting run claimable now (queues a ``wake`` notice)."""
    if s.run(QUERIES["wake_run"], {"id": run_id, "now": now}):
        s.notify("wake", run_id)
        return True
    return False


def resolve_wait(
    s: Session,
    run_id: str,
    key: str,
    wait_created_at: float,
    event: str,
    payload_json: str,
    now: float,
    *,
    status: str,
) -> None:
    """A signal resolves a registered wait: journal row, ``signaled`` event, wake-up."""
    write_step(
        s,
        run_id,
        key,
        "wait",
        "completed",
        now,
        output_json=payload_json,
        started_at=wait_created_at,
        completed_at=now,
    )
    add_event(s, run_id, "signaled", {"step": key, "event": event}, now)
    drop_sibling_waits(s, run_id, key)
    if status != "running":
        wake(s, run_id, now)


def drop_sibling_waits(s: Session, run_id: str, key: str) -> set[str]:
    """A wait for the first of several events (keys ``<step>@<event>``) was resolved:
    its other waits go, so the signals they would have taken stay buffered."""
    base, at, _ = key.rpartition("@")
    if not at:
        return set()
    prefix = base + "@"
    rows = s.all(
        QUERIES["drop_sibling_waits"],
        {"run_id": run_id, "prefix": prefix, "n": len(prefix), "key": key},
    )
    return {r["key"] for r in rows}


def write_child_result(
    s: Session,
    child: sqlite3.Row | dict[str, Any],
    now: float,
    *,
    output_json: str | None,
    error: dict[str, Any] | None,
) -> None:
    """A child ended: write the live parent's journal row and wake the parent."""
    parent_id = child["parent_id"]
    parent = s.one(QUERIES["get_run_state"], {"id": parent_id})
    if parent is None or parent["status"] not in ACTIVE_STATUSES:
        return
    if child["parent_step"] is not None:
        write_step(
            s,
            parent_id,
            child["parent_step"],
            "child",
            "failed" if error is not None else "completed",
            now,
            output_json=None if error is not None else output_json,
            error=None if error is None else {**error, "run_id": child["id"]},
            started_at=child["created_at"],
            completed_at=now,
        )
    wake(s, parent_id, now)


def cancel_descendants(s: Session, run_id: str, now: float) -> list[str]:
    """Cancel the live children of a run and, recursively, theirs (a child ends with its
    parent): status ``cancelled``, waits and buffered signals deleted, a ``cancelled``
    event naming the run, ``cancel`` and ``done`` notices. Returns their ids."""
    ids = [row["id"] for row in s.all(QUERIES["live_descendants"], {"id": run_id})]
    if ids:
        cancel_ids(s, ids, now, {"by": run_id})
    return ids


def cancel_ids(s: Session, ids: list[str], now: float, data: dict[str, Any] | None) -> None:
    """End the live runs ``ids`` as cancelled: their waits and buffered signals go, each
    gets a ``cancelled`` event (with ``data``) and its waiters and worker are told."""
    ids_json = json.dumps(ids)
    s.run(QUERIES["cancel_runs"], {"ids": ids_json, "now": now})
    s.run(QUERIES["delete_waits_of_runs"], {"ids": ids_json})
    s.run(QUERIES["delete_signals_of_runs"], {"ids": ids_json})
    s.conn.executemany(
        QUERIES["insert_event"],
        [{"run_id": i, "type": "cancelled", "data": dumps(data), "now": now} for i in ids],
    )
    for cancelled in ids:
        s.notify("cancel", cancelled)
        s.notify("done", cancelled)
