"""The producers section of the contract: create, cancel, signal and publish. Every
function runs on the backend's thread with a `Session`."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ...errors import RunNotFound, ValidationError
from ...ids import new_run_id
from ...records import (
    ACTIVE_STATUSES,
    ClaimParams,
    CreateResult,
    NewRun,
    Published,
    SignalOutcome,
)
from ._claims import lease_picked, pairs_json
from ._convert import dumps, micro, to_run
from ._flows import child_ended
from ._json import json_equal
from ._rows import (
    add_event,
    cancel_descendants,
    cancel_ids,
    insert_run,
    resolve_wait,
)
from ._session import QUERIES, Session

__all__ = ["cancel_run", "create_run", "deliver_signal", "publish"]


# --------------------------------------------------------------------------- shared writes


# --------------------------------------------------------------------------- producers


def create_run(s: Session, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
    with s.write() as now:
        if new.debounce_key is not None and new.debounce is not None:
            pending = debounce_pending(s, new, now)
            if pending is not None:
                return pending
        row = insert_run(s, new, now, parent_id=new.parent_id)
        if row is not None and claim is not None and not new.flow_controlled:  # leased here
            picked = [{"id": new.id, "status": "pending", "lease_owner": None}]
            (leased,) = lease_picked(
                s, picked, claim, pairs_json(claim.workflows), now, history=False
            )
            return CreateResult(leased.run, True, claimed=(leased,))
        if row is not None:
            s.notify("wake", new.id)
            return CreateResult(to_run(row), True)
        existing = None
        if new.idempotency_key is not None:
            existing = s.one(
                QUERIES["get_run_by_key"],
                {"workflow": new.workflow, "idempotency_key": new.idempotency_key},
            )
        if existing is None:
            existing = s.one(QUERIES["get_run"], {"id": new.id})
        if existing is None:  # pragma: no cover - a conflict always has a holder
            raise RunNotFound(new.id)
        if existing["workflow"] != new.workflow:
            raise ValidationError(
                f"run id {new.id!r} already names a run of workflow {existing['workflow']!r}"
            )
        differs = not json_equal(existing["input"], new.input_json)
        if differs:
            data = {"idempotency_key": new.idempotency_key, "input_differs": True}
            add_event(s, existing["id"], "duplicate_start", _strip_nulls(data), now)
        return CreateResult(to_run(existing), False, differs)


def debounce_pending(s: Session, new: NewRun, now: float) -> CreateResult | None:
    """A debounced start that finds the pending run of its key: that run takes the
    input and keys and is pushed back (``debounced`` event); None if there is none."""
    assert new.debounce is not None
    params = {
        "workflow": new.workflow,
        "debounce_key": new.debounce_key,
        "input": new.input_json,
        "available_at": micro(now + new.debounce),
        "concurrency_key": new.concurrency_key,
        "fifo_key": new.fifo_key,
        "rate_key": new.rate_key,
        "now": now,
    }
    row = s.one(QUERIES["debounce_run"], params)
    if row is None:
        return None
    add_event(s, row["id"], "debounced", {"debounce_key": new.debounce_key}, now)
    s.notify("wake", row["id"])
    return CreateResult(to_run(row), False)


def cancel_run(s: Session, run_id: str, rollback: bool = False) -> bool:
    with s.write() as now:
        state = s.one(QUERIES["get_run_state"], {"id": run_id})
        if state is None:
            raise RunNotFound(run_id)
        if state["status"] not in ACTIVE_STATUSES:
            return False
        if rollback and s.one(QUERIES["completed_run_step"], {"run_id": run_id}) is not None:
            _hand_to_rollback(s, run_id, now)
            return True
        _after_rollback(s, run_id)
        cancel_ids(s, [run_id], now, None)
        cancel_descendants(s, run_id, now)
        if state["parent_id"] is not None:
            error = {
                "type": "WorkflowCancelled",
                "message": f"run {run_id} was cancelled",
            }
            child_ended(s, state, now, output_json=None, error=error)
        return True


def _after_rollback(s: Session, run_id: str) -> None:
    """A run cancelled after its rollback pass: its error lists what was rolled back."""
    row = s.one(QUERIES["get_run"], {"id": run_id})
    marker = None if row is None or row["error"] is None else json.loads(row["error"])
    if not isinstance(marker, dict) or marker.get("rollback") is not True:
        return
    done: dict[str, list[str]] = {"completed": [], "failed": []}
    for step in s.all(QUERIES["rollback_steps"], {"run_id": run_id}):
        done[step["status"]].append(step["key"][len("~rollback:") :])
    error = {
        "type": "WorkflowCancelled",
        "message": f"run {run_id} was cancelled after its rollbacks",
        "compensated": done["completed"],
        "compensation_failed": done["failed"],
    }
    s.run(QUERIES["set_run_error"], {"id": run_id, "error": dumps(error)})


def _hand_to_rollback(s: Session, run_id: str, now: float) -> None:
    """See `Backend.cancel_run` (rollback): a rollback pass first, then the cancel."""
    error = {
        "type": "WorkflowCancelled",
        "rollback": True,
        "message": f"run {run_id} was cancelled; its rollbacks run first",
    }
    s.run(QUERIES["hand_to_rollback"], {"id": run_id, "error": dumps(error), "now": now})
    ids = json.dumps([run_id])
    s.run(QUERIES["delete_waits_of_runs"], {"ids": ids})
    s.run(QUERIES["delete_signals_of_runs"], {"ids": ids})
    add_event(s, run_id, "cancelling", {"rollback": True}, now)
    s.notify("cancel", run_id)
    s.notify("wake", run_id)
    cancel_descendants(s, run_id, now)


def deliver_signal(
    s: Session, run_id: str, event: str, payload_json: str, key: str | None
) -> SignalOutcome:
    with s.write() as now:
        state = s.one(QUERIES["get_run_state"], {"id": run_id})
        if state is None:
            raise RunNotFound(run_id)
        if key is not None:
            seen = s.one(QUERIES["get_signal_key"], {"run_id": run_id, "key": key})
            if seen is not None:
                answer: SignalOutcome = seen["outcome"]
                return answer
        if state["status"] not in ACTIVE_STATUSES:
            return "ended"
        outcome = _deliver(s, state, event, payload_json, now)
        if key is not None:
            s.run(
                QUERIES["insert_signal_key"],
                {"run_id": run_id, "key": key, "outcome": outcome, "now": now},
            )
        return outcome


def _deliver(
    s: Session, state: sqlite3.Row, event: str, payload_json: str, now: float
) -> SignalOutcome:
    """Resolve the run's oldest matching wait with the signal, or buffer it."""
    run_id = state["id"]
    wait = s.one(
        QUERIES["find_wait_for_signal"],
        {"run_id": run_id, "event": event, "payload": payload_json},
    )
    if wait is not None:
        resolve_wait(
            s,
            run_id,
            wait["key"],
            wait["created_at"],
            event,
            payload_json,
            now,
            status=state["status"],
        )
        return "resolved"
    s.run(
        QUERIES["insert_signal"],
        {"run_id": run_id, "event": event, "payload": payload_json, "now": now},
    )
    return "buffered"


def _unkeyed_lane(options: dict[str, Any]) -> dict[str, Any]:
    """A limited workflow's run started without its code: the workflow's '' lane."""
    limited = options.get("limited")
    if not isinstance(limited, dict):
        return {}
    return {"concurrency_key": "", "rate_key": "" if limited.get("rate") else None}


def publish(s: Session, event: str, payload_json: str, key: str | None) -> Published:
    with s.write() as now:
        if key is not None:
            done = s.one(QUERIES["get_published"], {"key": key})
            if done is not None:
                recorded = json.loads(done["result"])
                return Published(tuple(recorded["started"]), tuple(recorded["resumed"]))
        resumed: list[str] = []
        seen: set[str] = set()
        for wait in s.all(
            QUERIES["find_waits_for_event"], {"event": event, "payload": payload_json}
        ):
            if wait["run_id"] in seen:
                continue
            seen.add(wait["run_id"])
            resolve_wait(
                s,
                wait["run_id"],
                wait["key"],
                wait["created_at"],
                event,
                payload_json,
                now,
                status=wait["status"],
            )
            resumed.append(wait["run_id"])
        started: list[str] = []
        for sub in s.all(QUERIES["matching_subscriptions"], {"event": event}):
            registered = s.one(QUERIES["get_workflow_latest"], {"name": sub["workflow"]})
            if registered is None:
                continue
            options = json.loads(registered["options"]) or {}
            deadline = options.get("deadline_seconds")
            new = NewRun(
                id=new_run_id(int(now * 1000)),
                workflow=registered["name"],
                version=registered["version"],
                input_json=payload_json,
                priority=int(options.get("priority", 100)),
                retention_days=int(options.get("retention_days", 30)),
                deadline_in=None if deadline is None else float(deadline),
                **_unkeyed_lane(options),
            )
            if insert_run(s, new, now, parent_id=None, extra={"event": event}) is not None:
                started.append(new.id)
                s.notify("wake", new.id)
        if key is not None:
            s.run(
                QUERIES["insert_published"],
                {"key": key, "result": dumps({"started": started, "resumed": resumed}), "now": now},
            )
        return Published(tuple(started), tuple(resumed))


def _strip_nulls(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}
