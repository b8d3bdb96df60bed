"""Transitions on PostgreSQL (`Backend.apply`): a worker's batch of transitions in
one round trip.

The transitions without waits or children go together as one statement: one alone
is ``apply_transition`` (queries.sql), several one call of ``apply_transitions()``
(functions/51_apply_transitions.sql), which runs that same statement for each. The
others each call the plpgsql ``apply_transition()``, and a flow task's completion
that claims on complete is followed by its claim; with more than one statement, all
go in one pipelined transaction (BEGIN, the statements, COMMIT, one sync). Only when a
journal key already held a final row does a read-only query fetch it (after commit).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...records import Step, Transition, TransitionResult
from . import _flows
from ._conn import QUERIES, PgConnections, pipelined_transaction, retrying
from ._convert import batch_params, step_from_row, transition_params

__all__ = ["apply_transitions"]


async def apply_transitions(
    db: PgConnections, transitions: Sequence[Transition]
) -> list[TransitionResult]:
    """See `Backend.apply`."""
    if not transitions:
        return []
    # Stable lock order: by run id (the sort keeps a run's transitions in order).
    order = sorted(range(len(transitions)), key=lambda i: transitions[i].run_id)
    planned = [(i, *transition_params(transitions[i])) for i in order]
    return await retrying(functools.partial(_apply_once, db, transitions, planned), "apply batch")


async def _apply_once(
    db: PgConnections,
    transitions: Sequence[Transition],
    planned: list[tuple[int, bool, dict[str, Any]]],
) -> list[TransitionResult]:
    results: list[TransitionResult | None] = [None] * len(transitions)
    missing: list[tuple[int, str]] = []
    asks = {i: _flows.claim_on_complete(transitions[i]) for i, _, _ in planned}
    # Transitions with no waits or children go out together in one statement
    # (apply_transitions() applies them one by one, in order), each claim on complete
    # after it; the others one statement each, after those, and with them every
    # transition of their runs.
    apart_runs = {transitions[i].run_id for i, general, _ in planned if general}
    together = [(i, p) for i, _, p in planned if transitions[i].run_id not in apart_runs]
    apart = [plan for plan in planned if transitions[plan[0]].run_id in apart_runs]
    claims = any(ask is not None for ask in asks.values())
    # One statement is atomic on its own: no BEGIN, COMMIT and pipeline around it
    # (about 80 µs of a lone commit's).
    alone = bool(together) + len(apart) == 1 and not claims
    params_of = {i: params for i, _, params in planned}
    fenced: list[int] = []  # transitions fenced out
    async with db.connection() as conn:
        sent: list[tuple[list[int], bool, Any]] = []  # indexes, general, cursor
        handoffs: dict[int, Any] = {}  # claim on complete: index -> its cursor
        async with contextlib.nullcontext() if alone else pipelined_transaction(conn):
            if len(together) == 1 and asks[together[0][0]] is None:
                # One transition with no claim: its statement itself (no function call).
                index, params = together[0]
                cur = await conn.execute(QUERIES["apply_transition"], params | {"ord": 1})
                sent.append(([index], False, cur))
            elif together:
                values = batch_params(
                    [params for _, params in together],
                    [asks[i] is not None for i, _ in together],
                )
                cur = await conn.execute(QUERIES["apply_transitions"], values)
                sent.append(([i for i, _ in together], False, cur))
                for index, _ in together:
                    handoff = asks[index]
                    if handoff is not None:
                        handoffs[index] = await conn.execute(handoff[1], handoff[2])
            for index, general, params in apart:
                handoff = asks[index]
                if handoff is not None:
                    await conn.execute(handoff[0], handoff[2])
                if general:
                    query, values = QUERIES["apply_transition_general"], params
                else:
                    query, values = QUERIES["apply_transition"], params | {"ord": 1}
                sent.append(([index], general, await conn.execute(query, values)))
                if handoff is not None:
                    handoffs[index] = await conn.execute(handoff[1], handoff[2])
        for indexes, general, cur in sent:
            written_by = _written_by(general, await cur.fetchall())
            for place, index in enumerate(indexes, start=1):
                if place not in written_by:
                    fenced.append(index)
                    continue
                written = written_by[place]
                keys = params_of[index]["keys"]
                missing.extend((index, key) for key in keys if key not in written)
                handed = handoffs.get(index)
                claimed = (
                    () if handed is None else _flows.claimed_on_complete(await handed.fetchall())
                )
                results[index] = TransitionResult(ok=True, claimed=claimed)
        for index in fenced:
            # A fenced-out claim on complete may be the retry of a commit whose answer
            # was lost: what that commit handed over is handed over now.
            handed = (
                () if asks[index] is None else await _flows.handed_before(conn, transitions[index])
            )
            results[index] = TransitionResult(ok=False, claimed=handed)
        if missing:
            # Keys that already held a final row: the stored row wins. Final rows
            # never change, so reading them after the commit is exact.
            cur = await conn.execute(
                QUERIES["existing_steps"],
                {
                    "run_ids": [transitions[i].run_id for i, _ in missing],
                    "keys": [key for _, key in missing],
                },
            )
            stored = {(r[0], r[1]): step_from_row(r[1:]) for r in await cur.fetchall()}
            by_index: dict[int, list[Step]] = {}
            for index, key in missing:
                step = stored.get((transitions[index].run_id, key))
                if step is not None:
                    by_index.setdefault(index, []).append(step)
            for index, steps in by_index.items():
                results[index] = replace(
                    results[index] or TransitionResult(ok=True), existing=tuple(steps)
                )
    return [r if r is not None else TransitionResult(ok=False) for r in results]


def _written_by(general: bool, rows: list[Any]) -> dict[int, set[str]]:
    """The journal keys each applied transition of a statement wrote, by its place in
    the statement (1, 2, ...): ``apply_transition(s)`` return a row per applied one,
    ``apply_transition_general`` one row whose first column says if it applied."""
    if general:
        return {1: set(rows[0][1] or ())} if rows and rows[0][0] else {}
    return {int(row[0]): set(row[1] or ()) for row in rows}
