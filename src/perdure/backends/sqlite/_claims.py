"""Leasing picked runs to a worker (the second half of a claim), shared by
`claim_runs` and claim on complete (`Transition.claim`: a transition that completes
a DAG-flow task leases tasks of the same flow run in its own transaction)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from ...records import Claim, ClaimParams, Complete, Notice, Step, Transition, Wait
from ...serialization import Undecodable
from .._sqlfiles import load_queries
from ._convert import micro, to_dt, to_run, to_step, to_wait
from ._session import QUERIES, Session

__all__ = [
    "claim_on_complete",
    "handed_at_start",
    "handed_before",
    "lease_new_tasks",
    "lease_picked",
    "new_lease_token",
    "pairs_json",
]

FLOWS = load_queries(__package__, "flows.sql")


def new_lease_token() -> int:
    """A new lease token, SQL function ``new_lease_token()`` of every connection: 64
    random bits from `secrets` as a signed 64-bit int, never 0 (the token of a run
    never claimed). A token cannot be guessed from the claim's time, and one a claim
    undone by a crash handed out is not handed out again (docs/storage.md)."""
    return secrets.randbits(64) - 2**63 or 1


def pairs_json(pairs: Sequence[tuple[str, int]]) -> str:
    """The (workflow, version) pairs as the JSON list the claim queries read."""
    return json.dumps([[name, version] for name, version in pairs])


def lease_picked(
    s: Session,
    picked: Sequence[Any],
    params: ClaimParams,
    pairs: str,
    now: float,
    *,
    history: bool = True,
) -> list[Claim]:
    """Lease the picked rows (id, status, lease_owner) to the worker inside the open
    write transaction: a new token, the lease, ``lease_expired``/``claimed`` events;
    return each as a `Claim` with its journal and waits (``history=False``: runs just
    started, which have neither)."""
    ids_json = json.dumps([row["id"] for row in picked])
    expires = micro(now + params.lease_seconds)
    claimed = {
        row["id"]: row
        for row in s.all(
            QUERIES["claim_update"],
            {
                "ids": ids_json,
                "pairs": pairs,
                "worker": params.worker_id,
                "expires": expires,
                "now": now,
            },
        )
    }
    events: list[dict[str, Any]] = []
    for row in picked:
        run_id = row["id"]
        if row["status"] == "running":
            data = json.dumps({"worker": row["lease_owner"]})
            events.append({"run_id": run_id, "type": "lease_expired", "data": data, "now": now})
        data = json.dumps({"worker": params.worker_id})
        events.append({"run_id": run_id, "type": "claimed", "data": data, "now": now})
    s.conn.executemany(QUERIES["insert_event"], events)
    journals: dict[str, list[Step]] = {}
    waits: dict[str, list[Wait]] = {}
    if history:
        for step in s.all(QUERIES["claim_journals"], {"ids": ids_json}):
            journals.setdefault(step["run_id"], []).append(to_step(step))
        for wait in s.all(QUERIES["claim_waits"], {"ids": ids_json}):
            waits.setdefault(wait["run_id"], []).append(to_wait(wait))
    at = to_dt(now)
    return [
        _claim(
            claimed[row["id"]],
            tuple(journals.get(row["id"], ())),
            tuple(waits.get(row["id"], ())),
            at,
            recovered=row["status"] == "running",
        )
        for row in picked
    ]


def _claim(
    run: Any, journal: tuple[Step, ...], waits: tuple[Wait, ...], at: Any, *, recovered: bool
) -> Claim:
    """The `Claim` of a leased run's row (its columns and traceparent)."""
    record = to_run(run)
    values = [record.input, *(v for st in journal for v in (st.output, st.error))]
    values += [w.match for w in waits]
    poison = next((v for v in values if isinstance(v, Undecodable)), None)
    return Claim(
        run=record,
        lease_token=run["lease_token"],
        journal=() if poison else journal,
        waits=() if poison else waits,
        now=at,
        claims_since_progress=run["claims_since_progress"],
        step_attempts=run["step_attempts"],
        recovered=recovered,
        poison=None if poison is None else str(poison),
        traceparent=run["traceparent"],
        # (a flow task's row has no call order)
        call_order=tuple(json.loads(run["call_order"])) if "call_order" in run.keys() else (),  # noqa: SIM118
    )


def claim_on_complete(s: Session, t: Transition, now: float) -> tuple[Claim, ...]:
    """After ``t`` applied (ok) in the open transaction: if it completed a task, lease
    up to ``t.claim.limit`` of the tasks it started (created at ``now``) to the
    worker, and drop the flow run's wake notice when none of them is left."""
    params = t.claim
    if params is None or not isinstance(t.outcome, Complete):
        return ()
    task = s.one(FLOWS["completed_task"], {"id": t.run_id, "token": t.lease_token})
    if task is None or task["parent_id"] is None:
        return ()
    return lease_new_tasks(s, task["parent_id"], params, now)


def handed_before(s: Session, t: Transition, now: float) -> tuple[Claim, ...]:
    """For a claim on complete whose transition was fenced out: the tasks an earlier
    attempt of it leased to the worker, if that attempt committed (a retry after its
    answer was lost); none otherwise."""
    if t.claim is None or not isinstance(t.outcome, Complete):
        return ()
    rows = s.all(
        QUERIES["handed_before"],
        {"id": t.run_id, "token": t.lease_token, "worker": t.claim.worker_id, "now": now},
    )
    return _handed(rows, now)


def handed_at_start(s: Session, run_id: str, worker_id: str) -> tuple[Claim, ...]:
    """See `Backend.handed_at_start`."""
    now = s.clock()
    rows = s.all(QUERIES["handed_at_start"], {"id": run_id, "worker": worker_id, "now": now})
    return _handed(rows, now)


def _handed(rows: Sequence[Any], now: float) -> tuple[Claim, ...]:
    """Runs handed over again after a lost answer, as claims: just started, so no
    journal and no waits."""
    at = to_dt(now)
    return tuple(_claim(row, (), (), at, recovered=False) for row in rows)


def lease_new_tasks(s: Session, flow_id: str, params: ClaimParams, now: float) -> tuple[Claim, ...]:
    """Lease up to ``params.limit`` of the tasks of ``flow_id`` started in the open
    transaction (created at ``now``) to the worker, and drop the flow run's wake notice
    when none of them is left (claim on complete, and a flow start handed over)."""
    claims: list[Claim] = []
    if params.limit > 0 and params.workflows:
        pairs = pairs_json(params.workflows)
        picked = s.all(
            FLOWS["claim_select_tasks"],
            {"parent_id": flow_id, "now": now, "pairs": pairs, "limit": int(params.limit)},
        )
        if picked:
            claims = lease_picked(s, picked, params, pairs, now, history=False)
    left = s.one(FLOWS["pending_tasks_left"], {"parent_id": flow_id, "now": now})
    if left is None:  # every task it started was handed over: nobody needs waking
        wake = Notice("wake", flow_id)
        s.notices = [n for n in s.notices if n != wake]
    return tuple(claims)
