"""The registry section of the contract: workflows and topic subscriptions."""

from __future__ import annotations

import json

from ...records import (
    WorkflowRecord,
)
from ._convert import dumps
from ._session import QUERIES, Session


def register_workflows(s: Session, workflows: list[WorkflowRecord]) -> None:
    with s.write() as now:
        s.conn.executemany(
            QUERIES["upsert_workflow"],
            [
                {
                    "name": w.name,
                    "version": w.version,
                    "options": dumps(w.options or {}),
                    "now": now,
                }
                for w in workflows
            ],
        )


def get_workflow(s: Session, name: str, version: int | None) -> WorkflowRecord | None:
    if version is None:
        row = s.one(QUERIES["get_workflow_latest"], {"name": name})
    else:
        row = s.one(QUERIES["get_workflow_version"], {"name": name, "version": version})
    if row is None:
        return None
    return WorkflowRecord(row["name"], row["version"], json.loads(row["options"]) or {})


def subscribe_topic(s: Session, pattern: str, workflow: str) -> bool:
    with s.write() as now:
        args = {"pattern": pattern, "workflow": workflow, "now": now}
        return s.run(QUERIES["insert_subscription"], args) > 0


def unsubscribe_topic(s: Session, pattern: str, workflow: str) -> bool:
    with s.write():
        args = {"pattern": pattern, "workflow": workflow}
        return s.run(QUERIES["delete_subscription"], args) > 0


def list_subscriptions(s: Session) -> list[tuple[str, str]]:
    return [(r["pattern"], r["workflow"]) for r in s.all(QUERIES["list_subscriptions"], {})]
