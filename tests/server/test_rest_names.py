"""Every REST error message names REST's own fields (issue 42, point 6): a check made
below the edge in Python's words (``next_cursor``, ``run_id``, ``parent_id``,
``idempotency_key``, ``from_step``) reaches a REST caller as ``nextCursor``,
``runId``, ``parentId``, ``idempotencyKey``, ``fromStep``; the caller's own values
are quoted as sent. A real `perdure serve` on each backend; nothing is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .harness import environment, server, stored_rows

RUNS = "/v1/workflows/approval/runs"


def test_error_messages_name_the_rest_fields(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http:
        run_id = http.post(RUNS, {"input": {"order": 1}}).body["runId"]
        before = stored_rows(database)
        cases: list[tuple[str, str, Any, str, str]] = [
            ("GET", f"{RUNS}?cursor=%C3%A9t%C3%A9", None, "nextCursor", "next_cursor"),
            ("GET", f"{RUNS}?cursor=zzz", None, "nextCursor", "next_cursor"),
            ("GET", f"{RUNS}?parentId=", None, "parentId", "parent_id"),
            ("POST", RUNS, {"runId": "a/b"}, "runId", "run_id"),
            ("POST", RUNS, {"idempotencyKey": "a/b"}, "idempotencyKey", "idempotency_key"),
            ("POST", f"{RUNS}/{run_id}/signals/go?idempotencyKey=a%2Fb", 1, "idempotencyKey",
             "idempotency_key"),
            ("POST", f"/v1/runs/{run_id}/signals/go?idempotencyKey=a%2Fb", 1, "idempotencyKey",
             "idempotency_key"),
            ("POST", "/v1/events/go?idempotencyKey=a%2Fb", 1, "idempotencyKey",
             "idempotency_key"),
            ("POST", f"{RUNS}/{run_id}/fork", {"fromStep": ""}, "fromStep", "from_step"),
        ]  # fmt: skip
        for method, path, body, rest, python in cases:
            reply = http.call(method, path, body)
            assert reply.status == 422, (path, reply)
            message = reply.body["error"]["message"]
            assert rest in message and python not in message, (path, message)
        # what the caller sent is quoted as sent, even when it looks like a Python name
        reply = http.post(RUNS, {"runId": "run_id/1"})
        assert "runId must be" in reply.body["error"]["message"]
        assert "'run_id/1'" in reply.body["error"]["message"]
        assert stored_rows(database) == before
