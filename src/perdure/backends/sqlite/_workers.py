"""Worker transactions: claim, lease renewal and `apply` (fenced transitions)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, get_args

from ...errors import ValidationError
from ...records import (
    Claim,
    ClaimParams,
    Complete,
    DeferParams,
    Fail,
    NewRun,
    Park,
    Release,
    Retry,
    Step,
    StepKind,
    StepStatus,
    StepWrite,
    Transition,
    TransitionResult,
    WakeReason,
    WorkerInfo,
    waiting_data,
)
from ...serialization import brief_error
from ._claims import claim_on_complete, handed_before, lease_picked, pairs_json
from ._convert import INFINITY, micro, to_dt, to_ts, to_ts_opt
from ._flows import child_ended
from ._operations import retry_in
from ._rows import (
    add_event,
    cancel_descendants,
    drop_sibling_waits,
    insert_run,
    write_step,
)
from ._session import QUERIES, Session, is_busy

__all__ = ["apply", "claim_runs", "extend_leases", "release_orphans", "validate_transitions"]

log = logging.getLogger("perdure.backends.sqlite")

_STEP_KINDS = frozenset(get_args(StepKind))
_STEP_STATUSES = frozenset(get_args(StepStatus))
_WAKE_REASONS = frozenset(get_args(WakeReason))
_OUTCOMES = (Park, Complete, Fail, Retry, Release)


# --------------------------------------------------------------------------- claim


def claim_runs(s: Session, params: ClaimParams) -> list[Claim]:
    if params.limit <= 0 or not params.workflows:
        return []
    pairs = pairs_json(params.workflows)
    select = QUERIES["claim_select"]
    extra: dict[str, Any] = {}
    if params.limits:
        select = QUERIES["claim_select_limited"]
        limited = {x.workflow for x in params.limits}
        extra["plain"] = int(any(name not in limited for name, _ in params.workflows))
        extra["scan"] = 4 * params.limit + 16  # unkeyed runs of limited workflows
        extra["limits"] = json.dumps(
            [
                [x.workflow, x.concurrency, x.key_concurrency, x.rate_limit, x.rate_period, x.fifo]
                for x in params.limits
            ]
        )
    # A plain read first: an idle poll never takes the write lock.
    probe_limit = params.limit if params.limits else 1  # a lane's first run may be held back
    probe = s.one(select, {"now": s.clock(), "pairs": pairs, "limit": probe_limit, **extra})
    if probe is None:
        return []
    with s.write() as now:
        picked = s.all(select, {"now": now, "pairs": pairs, "limit": params.limit, **extra})
        if not picked:
            return []
        return lease_picked(s, picked, params, pairs, now)


def extend_leases(
    s: Session, worker_id: str, held: Sequence[tuple[str, int]], lease_seconds: float
) -> set[str]:
    with s.write() as now:
        s.run(QUERIES["touch_worker"], {"id": worker_id, "now": now})
        expires = micro(now + lease_seconds)
        still: set[str] = set()
        for run_id, token in held:
            if s.run(QUERIES["extend_lease"], {"id": run_id, "token": token, "expires": expires}):
                still.add(run_id)
        return still


def release_orphans(s: Session, worker_id: str, held: Sequence[str]) -> int:
    keep = set(held)
    with s.write() as now:
        rows = s.all(QUERIES["release_orphan_candidates"], {"worker": worker_id})
        orphans = [row["id"] for row in rows if row["id"] not in keep]
        at = micro(now)
        for run_id in orphans:
            s.run(QUERIES["release_orphan"], {"id": run_id, "worker": worker_id, "now": at})
        return len(orphans)


# --------------------------------------------------------------------------- apply


def _unique_steps(steps: Sequence[StepWrite]) -> list[StepWrite]:
    """One write per key: a final write in the batch is not replaced by a later one."""
    chosen: dict[str, StepWrite] = {}
    for step in steps:
        previous = chosen.get(step.key)
        if previous is None or previous.status == "retrying":
            chosen[step.key] = step
    return list(chosen.values())


def validate_transitions(transitions: Sequence[Transition]) -> None:
    """Reject values that would corrupt the store, before anything is written."""
    for t in transitions:
        if t.step_attempts < 0:
            raise ValidationError(f"run {t.run_id}: step_attempts must not be negative")
        for step in t.steps:
            if step.kind not in _STEP_KINDS:
                raise ValidationError(f"run {t.run_id}: unknown step kind {step.kind!r}")
            if step.status not in _STEP_STATUSES:
                raise ValidationError(f"run {t.run_id}: unknown step status {step.status!r}")
        if t.outcome is not None and not isinstance(t.outcome, _OUTCOMES):
            raise ValidationError(f"run {t.run_id}: unknown outcome {t.outcome!r}")
        if isinstance(t.outcome, Park) and t.outcome.reason not in _WAKE_REASONS:
            raise ValidationError(f"run {t.run_id}: unknown park reason {t.outcome.reason!r}")


def apply(s: Session, transitions: Sequence[Transition]) -> list[TransitionResult]:
    validate_transitions(transitions)
    results: list[TransitionResult] = []
    with s.write() as now:
        for t in transitions:
            outer = s.notices
            s.notices = []
            s.conn.execute("SAVEPOINT transition")
            try:
                result = _apply_one(s, t, now)
                if result.ok and t.claim is not None:
                    result = replace(result, claimed=claim_on_complete(s, t, now))
                elif t.claim is not None:  # maybe the retry of a commit whose answer was lost
                    result = replace(result, claimed=handed_before(s, t, now))
            except sqlite3.Error as exc:
                s.notices = outer
                if is_busy(exc):
                    raise
                s.conn.execute("ROLLBACK TO transition")
                s.conn.execute("RELEASE transition")
                log.error(
                    "run %s: transition rejected by SQLite, nothing written: %s", t.run_id, exc
                )
                results.append(TransitionResult(ok=False))
                continue
            s.conn.execute("RELEASE transition")
            outer.extend(s.notices)
            s.notices = outer
            results.append(result)
    return results


def _apply_one(s: Session, t: Transition, now: float) -> TransitionResult:
    fence = s.one(
        QUERIES["fence_run"],
        {
            "id": t.run_id,
            "token": t.lease_token,
            "step_attempts": t.step_attempts,
            "now": now,
            "asked": json.dumps(t.asked) if t.asked else None,
        },
    )
    if fence is None:
        return TransitionResult(ok=False)
    if not isinstance(t.outcome, Complete | Fail):
        s.notify("progress", t.run_id)  # watchers see the history grow
    existing: list[Step] = []
    for w in _unique_steps(t.steps):
        stored = write_step(
            s,
            t.run_id,
            w.key,
            w.kind,
            w.status,
            now,
            output_json=w.output_json,
            error=w.error,
            attempts=w.attempts,
            started_at=to_ts_opt(w.started_at),
            completed_at=to_ts_opt(w.completed_at),
        )
        if stored is not None:
            existing.append(stored)
    if t.events:
        s.conn.executemany(
            QUERIES["insert_event"],
            [
                {
                    "run_id": t.run_id,
                    "type": e.type,
                    "data": None if e.data is None else json.dumps(e.data, default=str),
                    "now": now,
                }
                for e in t.events
            ],
        )
    for child in t.children:
        if insert_run(s, child, now, parent_id=t.run_id) is not None:
            s.notify("wake", child.id)
        else:
            _existing_child(s, t.run_id, child, now)
    outcome = t.outcome
    if isinstance(outcome, Park):
        _park(s, t, outcome, fence["deadline_at"], now)
    elif isinstance(outcome, Complete | Fail):
        _finish(s, t.run_id, outcome, fence, now)
    elif isinstance(outcome, Retry):
        data = {"wake_at": outcome.wake_at.isoformat(), "error": brief_error(outcome.error)}
        add_event(s, t.run_id, "retrying", data, now)
        deadline_at = fence["deadline_at"]
        wake_at = to_ts(outcome.wake_at)
        if deadline_at is not None:
            wake_at = min(wake_at, deadline_at)
        s.run(
            QUERIES["retry_run"],
            {
                "id": t.run_id,
                "error": json.dumps(outcome.error, default=str),
                "available_at": wake_at,
                "now": now,
            },
        )
        if outcome.reopen:
            s.run(QUERIES["reopen_steps"], {"run_id": t.run_id, "keys": json.dumps(outcome.reopen)})
        if wake_at <= now:
            s.notify("wake", t.run_id)
    elif isinstance(outcome, Release):
        s.run(QUERIES["release_run"], {"id": t.run_id, "now": now})
        s.notify("wake", t.run_id)
    return TransitionResult(ok=True, existing=tuple(existing))


def _existing_child(s: Session, parent_id: str, child: NewRun, now: float) -> None:
    """The child exists already (its parent was retried): a completed one gives its
    output at once; a failed or cancelled one is retried (its end reaches the parent
    as any child's does)."""
    row = s.one(
        QUERIES["get_run_by_key"],
        {"workflow": child.workflow, "idempotency_key": child.idempotency_key},
    )
    if row is None or child.parent_step is None:
        return
    if row["status"] == "completed":
        write_step(
            s,
            parent_id,
            child.parent_step,
            "child",
            "completed",
            now,
            output_json=row["output"],
            started_at=row["created_at"],
        )
    elif row["status"] in ("failed", "cancelled"):
        retry_in(s, row["id"], None, f"the retry of its parent {parent_id}", now)
        s.notify("wake", row["id"])


def _park(s: Session, t: Transition, park: Park, deadline_at: float | None, now: float) -> None:
    run_id = t.run_id
    due_now = False
    for w in t.waits:
        s.run(
            QUERIES["insert_wait"],
            {
                "run_id": run_id,
                "key": w.key,
                "event": w.event,
                "match": w.match_json,
                "timeout_at": to_ts_opt(w.timeout_at),
                "now": now,
            },
        )
        if s.one(QUERIES["final_step_exists"], {"run_id": run_id, "key": w.key}) is not None:
            due_now = True  # resolved while the run was running: nothing left to wait for
    for child in t.children:
        if (
            child.parent_step is not None
            and s.one(QUERIES["final_step_exists"], {"run_id": run_id, "key": child.parent_step})
            is not None
        ):
            due_now = True  # the child already ended
    add_event(s, run_id, "waiting", waiting_data(park, t.waits), now)
    timeouts: list[float] = []
    dropped: set[str] = set()
    for wait in s.all(QUERIES["run_waits"], {"run_id": run_id}):
        if wait["key"] in dropped:
            continue  # a sibling took a signal first
        signal = s.one(
            QUERIES["find_buffered_signal"],
            {"run_id": run_id, "event": wait["event"], "match": wait["match"]},
        )
        if signal is None:
            if wait["timeout_at"] is not None:
                timeouts.append(wait["timeout_at"])
            continue
        s.run(QUERIES["delete_signal"], {"id": signal["id"]})
        write_step(
            s,
            run_id,
            wait["key"],
            "wait",
            "completed",
            now,
            output_json=signal["payload"],
            started_at=wait["created_at"],
            completed_at=now,
        )
        data = {"step": wait["key"], "event": wait["event"], "buffered": True}
        add_event(s, run_id, "signaled", data, now)
        dropped |= drop_sibling_waits(s, run_id, wait["key"])
        due_now = True
    if due_now:
        available_at = now
    else:
        times = [x for x in (to_ts_opt(park.wake_at), deadline_at, *timeouts) if x is not None]
        available_at = min(times) if times else INFINITY
    s.run(
        QUERIES["park_run"],
        {
            "id": run_id,
            "reason": park.reason,
            "available_at": available_at,
            "now": now,
            "error": None if park.error is None else json.dumps(park.error, default=str),
        },
    )
    if available_at <= now:
        s.notify("wake", run_id)


def _finish(
    s: Session, run_id: str, outcome: Complete | Fail, fence: sqlite3.Row, now: float
) -> None:
    if isinstance(outcome, Complete):
        status, output, error = "completed", outcome.output_json, None
    else:
        status, output, error = "failed", None, outcome.error
    s.run(
        QUERIES["finish_run"],
        {
            "id": run_id,
            "status": status,
            "output": output,
            "error": None if error is None else json.dumps(error, default=str),
            "now": now,
        },
    )
    s.run(QUERIES["delete_run_waits"], {"run_id": run_id})
    s.run(QUERIES["delete_run_signals"], {"run_id": run_id})
    add_event(s, run_id, status, None if error is None else brief_error(error), now)
    s.notify("done", run_id)
    if error is not None:
        cancel_descendants(s, run_id, now)  # a failed run's live children end with it
    if fence["parent_id"] is not None:
        child = {
            "id": run_id,
            "parent_id": fence["parent_id"],
            "parent_step": fence["parent_step"],
            "created_at": fence["created_at"],
        }
        child_ended(s, child, now, output_json=output, error=error)  # a task: its flow's rule


# --------------------------------------------------------------------------- versions


def defer_unavailable(s: Session, params: DeferParams) -> list[str]:
    if params.limit <= 0 or not params.workflows:
        return []
    names = json.dumps(sorted({name for name, _ in params.workflows}))
    query = {"names": names, "pairs": pairs_json(params.workflows), "limit": params.limit}
    if (
        s.one(QUERIES["defer_select"], {**query, "cutoff": s.clock() - params.grace_seconds})
        is None
    ):
        return []  # the common case: a plain read, no write lock
    deferred = []
    with s.write() as now:
        for row in s.all(QUERIES["defer_select"], {**query, "cutoff": now - params.grace_seconds}):
            count = s.one(QUERIES["count_version_unavailable"], {"id": row["id"]})
            delay = min(300.0, 5.0 * 2 ** int(count["n"] if count else 0))
            s.run(
                QUERIES["defer_update"],
                {"id": row["id"], "available_at": micro(now + delay), "now": now},
            )
            data = {"worker": params.worker_id, "version": row["version"], "retry_in": delay}
            add_event(s, row["id"], "version_unavailable", data, now)
            deferred.append(row["id"])
    return deferred


def park_undecodable(
    s: Session, run_id: str, lease_token: int, worker_id: str, reason: str
) -> datetime | None:
    with s.write() as now:
        count = s.one(QUERIES["count_undecodable"], {"id": run_id})
        delay = min(300.0, 5.0 * 2 ** int(count["n"] if count else 0))
        row = s.one(
            QUERIES["park_undecodable"],
            {"id": run_id, "token": lease_token, "available_at": micro(now + delay), "now": now},
        )
        if row is None:
            return None
        data = {"worker": worker_id, "reason": reason, "retry_in": delay}
        add_event(s, run_id, "undecodable", data, now)
    return to_dt(row["available_at"])


def register_worker(s: Session, info: WorkerInfo) -> None:
    with s.write() as now:
        s.run(
            QUERIES["upsert_worker"],
            {
                "id": info.id,
                "host": info.host,
                "pid": info.pid,
                "workflows": json.dumps(list(info.workflows)),
                "concurrency": info.concurrency,
                "started_at": to_ts(info.started_at),
                "now": now,
            },
        )


def deregister_worker(s: Session, worker_id: str) -> None:
    with s.write() as now:
        s.run(QUERIES["stop_worker"], {"id": worker_id, "now": now})


def next_wake_at(s: Session, workflows: list[tuple[str, int]]) -> datetime | None:
    pairs = json.dumps([[name, version] for name, version in workflows])
    row = s.one(QUERIES["next_wake_at"], {"pairs": pairs})
    at = None if row is None else row["at"]
    return None if at is None or at >= INFINITY else to_dt(at)
