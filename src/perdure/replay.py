"""Checking stored runs against new code before a deploy, and run histories as files.

`replay_check` replays each selected run's body (the code registered on your `App`)
over its journal without executing any step function: steps resolve from the
journal, and each replay stops at the first step the journal does not hold. It
reports the runs whose replay would diverge (docs/versioning.md) and writes nothing.

`export_run` writes a run with its journal as a JSON document; `replay_check` also
takes such files, so real histories can be kept as test fixtures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .engine.runner import Runner
from .engine.services import RunServices
from .errors import ValidationError
from .records import Claim, Run, Step, Transition, TransitionResult

if TYPE_CHECKING:
    from .app import App

__all__ = ["EXPORT_FORMAT", "Divergence", "export_run", "replay_check", "replay_check_async"]

#: The ``format`` of an exported run.
EXPORT_FORMAT = "perdure-run/1"

_LIVE = ("pending", "waiting", "running")


@dataclass(frozen=True, slots=True)
class Divergence:
    """A run whose replay on the checked code would diverge.

    ``position`` is the place in the run's call order; ``journaled`` the step the
    journal holds there (``{"name", "kind"}``, None when the code asked for more than
    the journal holds); ``asked`` what the code asked for instead (None: it ended).
    """

    run_id: str
    workflow: str
    version: int | None
    position: int
    journaled: dict[str, Any] | None
    asked: dict[str, Any] | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _History:
    run: Run
    journal: tuple[Step, ...]
    call_order: tuple[str, ...]


async def replay_check_async(
    app: App,
    *,
    workflow: str | None = None,
    status: str | Sequence[str] | None = None,
    since: datetime | None = None,
    limit: int = 1000,
    files: Iterable[str | Path] = (),
) -> list[Divergence]:
    """See `replay_check`."""
    histories = [_load(Path(f)) for f in files]
    if not histories or workflow is not None or status is not None or since is not None:
        histories += await _stored(app, workflow, status, since, limit)
    now = await (await app._backend()).now()
    found: list[Divergence] = []
    with ThreadPoolExecutor(1) as pool:
        for history in histories:
            divergence = await _check(app, history, now, pool)
            if divergence is not None:
                found.append(divergence)
    return found


def replay_check(
    app: App,
    *,
    workflow: str | None = None,
    status: str | Sequence[str] | None = None,
    since: datetime | None = None,
    limit: int = 1000,
    files: Iterable[str | Path] = (),
) -> list[Divergence]:
    """The stored runs that would diverge if the code registered on ``app`` took them.

    Run it in CI against the production database (or exported runs) before a deploy:
    an empty list means every checked run replays cleanly on the new code. Nothing
    is written to the database.

    Args:
        app: your `App` with the new code's workflows registered.
        workflow: only runs of this workflow.
        status: only runs in this status (or these); default: the live ones
            (pending, waiting, running).
        since: only runs created at or after this time.
        limit: at most this many runs per status (newest first).
        files: runs exported with ``perdure runs export`` (`export_run`) to check
            too; with files and no filter, only the files are checked.

    Runs of a workflow or version ``app`` does not register are skipped: that code
    would never take them.
    """
    return app._portal.call(
        replay_check_async,
        app,
        workflow=workflow,
        status=status,
        since=since,
        limit=limit,
        files=list(files),
    )


async def _stored(
    app: App,
    workflow: str | None,
    status: str | Sequence[str] | None,
    since: datetime | None,
    limit: int,
) -> list[_History]:
    statuses = (status,) if isinstance(status, str) else tuple(status or _LIVE)
    backend = await app._backend()
    histories: list[_History] = []
    for state in statuses:
        cursor: str | None = None
        left = limit
        while left > 0:
            page = await app.list_runs_async(
                workflow, state, since, limit=min(left, 1000), cursor=cursor
            )
            for run in page.items:
                journal = tuple(await backend.get_steps(run.id))
                order = await backend.get_call_order(run.id)
                histories.append(_History(run, journal, order))
            left -= len(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
    return histories


async def _check(
    app: App, history: _History, now: datetime, pool: ThreadPoolExecutor
) -> Divergence | None:
    run = history.run
    definition = None if run.version is None else app._registry.get(run.workflow, run.version)
    rolling_back = isinstance(run.error, dict) and run.error.get("rollback") is True
    if definition is None or rolling_back or any(s.kind == "flow-task" for s in history.journal):
        return None  # not this code's, a cancel's rollbacks, or a DAG flow's run
    claim = Claim(
        run=replace(run, status="running"),
        lease_token=0,
        journal=history.journal,
        waits=(),
        now=now,
        claims_since_progress=0,
        step_attempts=0,
        call_order=history.call_order,
    )
    services = RunServices(_no_commit, pool, app._registry, stopping=lambda: False)
    error = await Runner(claim, definition, services).check()
    if error is None:
        return None
    return Divergence(
        run_id=run.id,
        workflow=run.workflow,
        version=run.version,
        position=int(error.get("position") or 0),
        journaled=error.get("journaled"),
        asked=error.get("asked"),
        message=str(error.get("message")),
    )


async def _no_commit(transition: Transition) -> TransitionResult:
    raise RuntimeError("a replay check commits nothing")  # pragma: no cover - never called


# --------------------------------------------------------------------------- files


async def export_run_async(app: App, run_id: str) -> dict[str, Any]:
    """See `export_run`."""
    run = await app.get_run_async(run_id)
    backend = await app._backend()
    steps = await backend.get_steps(run.id)
    return {
        "format": EXPORT_FORMAT,
        "run": _jsonable(asdict(run)),
        "journal": [_jsonable(asdict(s)) for s in steps if s.kind != "flow-task"],
        "call_order": list(await backend.get_call_order(run.id)),
    }


def export_run(app: App, run_id: str) -> dict[str, Any]:
    """A run with its journal and call order as a JSON document (``perdure runs
    export``), which `replay_check` takes back as a file.

    Raises:
        RunNotFound: no such run.
    """
    return app._portal.call(export_run_async, app, run_id)


def _jsonable(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in fields.items()}


def _load(path: Path) -> _History:
    try:
        doc = json.loads(path.read_text("utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise ValueError(f"not a {EXPORT_FORMAT} document")
        run = Run(**_times(doc["run"], Run))
        journal = tuple(
            Step(**{k: v for k, v in _times(s, Step).items() if k != "tasks"})
            for s in doc["journal"]
        )
        order = tuple(str(e) for e in doc.get("call_order") or ())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValidationError(f"{path}: not a run exported by perdure: {exc}") from None
    return _History(run, journal, order)


def _times(fields: dict[str, Any], kind: type) -> dict[str, Any]:
    names = kind.__dataclass_fields__  # type: ignore[attr-defined]
    out = {k: v for k, v in fields.items() if k in names}
    for key, value in out.items():
        if key.endswith("_at") and isinstance(value, str):
            out[key] = datetime.fromisoformat(value)
    return out
