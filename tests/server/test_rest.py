"""Every REST route end to end: a real `perdure serve` process and a real worker
process on each backend, driven over HTTP."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.engine.helpers import wait_for

from .harness import Http, Reply, environment, free_port, process, server

RUNS = "/v1/workflows/{}/runs"


def _run(http: Http, workflow: str, run_id: str) -> dict[str, Any]:
    reply = http.get(f"{RUNS.format(workflow)}/{run_id}")
    assert reply.status == 200, reply.body
    body: dict[str, Any] = reply.body
    return body


def _until(http: Http, workflow: str, run_id: str, status: str) -> dict[str, Any]:
    return wait_for(lambda: (r := _run(http, workflow, run_id))["status"] == status and r, 20)


def _count(http: Http, workflow: str) -> int:
    return len(http.get(RUNS.format(workflow) + "?limit=1000").body["items"])


def test_every_route_end_to_end(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http, process(["worker", "rest_app:app"], env, tmp_path):
        assert http.get("/healthz").body == {"status": "ok", "database": "ok"}

        # start, idempotently, and read the run until it completes
        started = http.post(RUNS.format("greet"), {"input": "ada", "idempotencyKey": "k1"})
        assert started.status == 201 and started.body["created"] is True
        run_id = started.body["runId"]
        again = http.post(RUNS.format("greet"), {"input": "ada", "idempotencyKey": "k1"})
        assert again.status == 200 and again.body == {
            **started.body,
            "created": False,
            "status": again.body["status"],
        }
        done = _until(http, "greet", run_id, "completed")
        assert done["output"] == "hi ada" and done["workflow"] == "greet"
        assert {"createdAt", "completedAt", "parentId", "retentionDays"} <= set(done)

        # the journal and the audit trail
        steps = http.get(f"{RUNS.format('greet')}/{run_id}/steps").body
        assert [(s["name"], s["status"], s["output"]) for s in steps["items"]] == [
            ("greet", "completed", "hi ada")
        ]
        events = [
            e["type"] for e in http.get(f"{RUNS.format('greet')}/{run_id}/events").body["items"]
        ]
        assert events[0] == "created" and "completed" in events
        first = http.get(f"{RUNS.format('greet')}/{run_id}/events?limit=1").body
        assert len(first["items"]) == 1 and first["nextCursor"]
        rest = http.get(f"{RUNS.format('greet')}/{run_id}/events?cursor={first['nextCursor']}")
        assert [e["type"] for e in first["items"] + rest.body["items"]] == events

        # a signal resolves a waiting run; input filters and status filters list runs
        waiting = http.post(RUNS.format("approval"), {"input": {"order": 7}}).body["runId"]
        _until(http, "approval", waiting, "waiting")
        signal = http.post(f"{RUNS.format('approval')}/{waiting}/signals/approve", {"ok": True})
        assert signal.status == 200 and signal.body == {"delivered": True}
        assert _until(http, "approval", waiting, "completed")["output"] == {"ok": True}
        other = http.post(RUNS.format("approval"), {"input": {"order": 8}}).body["runId"]
        matched = http.get(RUNS.format("approval") + "?input.order=7").body["items"]
        assert [r["id"] for r in matched] == [waiting]
        listed = http.get(RUNS.format("approval") + "?status=completed").body["items"]
        assert [r["id"] for r in listed] == [waiting]
        page = http.get(RUNS.format("approval") + "?limit=1").body
        assert [r["id"] for r in page["items"]] == [other] and page["nextCursor"]
        second = http.get(RUNS.format("approval") + f"?limit=1&cursor={page['nextCursor']}").body
        assert [r["id"] for r in second["items"]] == [waiting] and second["nextCursor"] is None

        # cancel (DELETE) a live run, then again
        _until(http, "approval", other, "waiting")
        cancelled = http.delete(f"{RUNS.format('approval')}/{other}")
        assert cancelled.status == 200 and cancelled.body == {"runId": other, "cancelled": True}
        assert _run(http, "approval", other)["status"] == "cancelled"
        assert http.delete(f"{RUNS.format('approval')}/{other}").body["cancelled"] is False
        ended = http.post(f"{RUNS.format('approval')}/{other}/signals/approve", {"late": 1})
        assert ended.body == {"delivered": False}

        # topic subscriptions and publishing
        sub = {"pattern": "order.*", "workflow": "greet"}
        assert http.post("/v1/subscriptions", sub).status == 201
        assert http.post("/v1/subscriptions", sub).status == 200
        assert http.get("/v1/subscriptions").body["items"] == [{**sub, "changed": False}]
        published = http.post("/v1/events/order.placed", "bob").body
        assert len(published["started"]) == 1 and published["resumed"] == []
        assert _until(http, "greet", published["started"][0], "completed")["output"] == "hi bob"
        assert http.delete("/v1/subscriptions?pattern=order.*&workflow=greet").body["changed"]
        assert http.get("/v1/subscriptions").body["items"] == []

        # workflows and workers
        counts = {w["name"]: w["counts"] for w in http.get("/v1/workflows").body["items"]}
        assert counts["greet"]["completed"] == 2 and counts["approval"]["cancelled"] == 1
        workers = http.get("/v1/workers").body["items"]
        assert any("greet@1" in w["workflows"] for w in workers)

        # the database's gauges for Prometheus
        with urllib.request.urlopen(http.base + "/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain")
            text = answer.read().decode()
        assert 'workflow_runs_in_flight{state="running",workflow="greet"} 0.0' in text
        assert 'workflow_queue_depth{workflow="approval"} 0.0' in text


def test_bad_requests_answer_4xx_in_one_shape_and_store_nothing(  # type: ignore[no-untyped-def]
    database, tmp_path: Path
) -> None:
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http:
        run_id = http.post(RUNS.format("greet"), {"input": "x"}).body["runId"]
        bad: list[tuple[str, str, Any, dict[str, Any], int, str]] = [
            ("GET", f"{RUNS.format('greet')}/nope", None, {}, 404, "RunNotFound"),
            ("GET", f"{RUNS.format('approval')}/{run_id}", None, {}, 404, "RunNotFound"),
            ("GET", RUNS.format("greet") + "?status=done", None, {}, 422, "ValidationError"),
            ("GET", RUNS.format("greet") + "?cursor=zzz", None, {}, 422, "ValidationError"),
            ("GET", RUNS.format("greet") + "?limit=0", None, {}, 422, "ValidationError"),
            ("GET", RUNS.format("greet") + "?since=yesterday", None, {}, 422, "ValidationError"),
            ("GET", "/v1/workers?seenWithin=forever", None, {}, 422, "ValidationError"),
            ("GET", "/v1/no/such/route", None, {}, 404, "NotFound"),
            ("PUT", RUNS.format("greet"), None, {}, 405, "MethodNotAllowed"),
            ("POST", RUNS.format("greet"), {"input": 1, "bogus": 2}, {}, 422, "ValidationError"),
            ("POST", RUNS.format("greet"), {"priority": "high"}, {}, 422, "ValidationError"),
            ("POST", RUNS.format("greet"), {"version": 0}, {}, 422, "ValidationError"),
            ("POST", RUNS.format("bad%20name"), {}, {}, 422, "ValidationError"),
            ("POST", RUNS.format("greet"), {"idempotencyKey": ""}, {}, 422, "ValidationError"),
            ("POST", RUNS.format("greet"), None, {"raw": b"{nope"}, 422, "ValidationError"),
            ("POST", RUNS.format("greet"), None, {"raw": b"[" * 100_000}, 422, "ValidationError"),
            ("POST", RUNS.format("greet"), None, {"raw": b'"' + b"a" * 1_100_000 + b'"'}, 413,
             "PayloadTooLarge"),
            ("POST", f"{RUNS.format('greet')}/{run_id}/signals/bad%20event", 1, {}, 422,
             "ValidationError"),
            ("POST", "/v1/events/x?idempotencyKey=" + "k" * 300, 1, {}, 422, "ValidationError"),
            ("POST", "/v1/subscriptions", {"pattern": "", "workflow": "greet"}, {}, 422,
             "ValidationError"),
            ("DELETE", "/v1/subscriptions?pattern=a", None, {}, 422, "ValidationError"),
        ]  # fmt: skip
        for method, path, body, extra, status, kind in bad:
            reply = http.call(method, path, body, **extra)
            assert (reply.status, reply.body["error"]["type"]) == (status, kind), (path, reply)
            assert reply.body["error"]["message"]
        assert _count(http, "greet") == 1
        assert http.get("/v1/subscriptions").body["items"] == []


def test_run_ids_follow_one_rule_and_every_stored_id_can_be_addressed(  # type: ignore[no-untyped-def]
    database, tmp_path: Path
) -> None:
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http:
        victim = http.post(RUNS.format("approval"), {"input": {"order": 1}}).body["runId"]
        refused = ["tenant/42", f"zz/../{victim}", "..", ".", "a\u0001b", "a\u0085b", "q?x=1",
                   "frag#1", "pct%2F", "back\\slash"]  # fmt: skip
        for bad in refused:
            for field in ("runId", "idempotencyKey"):
                reply = http.post(RUNS.format("greet"), {"input": "x", field: bad})
                assert (reply.status, reply.body["error"]["type"]) == (422, "ValidationError")
                assert "must be 1-255 characters" in reply.body["error"]["message"]
            key = quote(bad, safe="")
            for path in (
                f"{RUNS.format('approval')}/{victim}/signals/poke?idempotencyKey={key}",
                f"/v1/events/poke?idempotencyKey={key}",
            ):
                reply = http.post(path, {})
                assert (reply.status, reply.body["error"]["type"]) == (422, "ValidationError")
        assert _count(http, "greet") == 0
        events = http.get(f"{RUNS.format('approval')}/{victim}/events").body["items"]
        assert [e["type"] for e in events] == ["created"]  # no signal was stored
        # What the rule allows, each addressed by the routes with its id quoted.
        for good in ["tenant 42", "order:42@eu-west", "café ✓ 日本", "a..b", "+&=;,"]:
            started = http.post(RUNS.format("approval"), {"input": {"order": 2}, "runId": good})
            assert (started.status, started.body["runId"]) == (201, good)
            path = f"{RUNS.format('approval')}/{quote(good, safe='')}"
            assert http.get(path).body["id"] == good
            assert http.get(f"{path}/events").body["items"][0]["type"] == "created"
            assert http.post(f"{path}/signals/poke", {}).status == 200
            assert http.delete(path).body == {"runId": good, "cancelled": True}
            assert http.get(path).body["status"] == "cancelled"


@pytest.mark.parametrize("sqlite_only", [None])
def test_tokens_are_required_when_set_and_both_rotation_tokens_work(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path, sqlite_only: None
) -> None:
    old, new = "old-token-0123456789", "new-token-9876543210"
    env = environment(sqlite_database, tmp_path, PERDURE_API_TOKENS=f"{old}, {new}")
    with server(env, tmp_path, "--host", "0.0.0.0") as http:
        assert http.get("/healthz").status == 200  # open, for load balancers
        for token in (None, "wrong-token-000000000"):
            reply = Http(http.base, token).get("/v1/workflows")
            assert reply.status == 401 and reply.body["error"]["type"] == "Unauthorized"
            assert reply.headers.get("www-authenticate") == "Bearer"
        assert Http(http.base, old).get("/v1/workflows").status == 200
        assert Http(http.base, new).post(RUNS.format("greet"), {"input": 1}).status == 201
        assert Http(http.base, None).post(RUNS.format("greet"), {"input": 2}).status == 401
        assert len(Http(http.base, new).get(RUNS.format("greet")).body["items"]) == 1


def test_without_tokens_the_server_refuses_to_listen_beyond_loopback(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path)
    with process(["serve", "--host", "0.0.0.0", "--port", "0"], env, tmp_path) as proc:
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "refusing to listen on '0.0.0.0' without API tokens" in out
    assert "Traceback" not in out


RECOVERY_APP = """
from perdure import App, Context, RetryPolicy
from pathlib import Path

app = App()
FLAG = Path(__file__).parent / "fixed"

def b_step() -> str:
    if not FLAG.exists():
        raise RuntimeError("b is broken")
    return "b"

@app.workflow
async def pipe(ctx: Context, _: object) -> list[str]:
    once = RetryPolicy(max_attempts=1)
    a = await ctx.step.run("a", lambda: "a", retry=once)
    b = await ctx.step.run("b", b_step, retry=once)
    return [a, b]
"""


def test_retry_fork_and_bulk_over_rest(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    (tmp_path / "recovery_app.py").write_text(RECOVERY_APP)
    runs = RUNS.format("pipe")
    with server(env, tmp_path) as http, process(["worker", "recovery_app:app"], env, tmp_path):
        ids = [http.post(runs, {}).body["runId"] for _ in range(3)]
        for run_id in ids:
            _until(http, "pipe", run_id, "failed")
        live = http.post(RUNS.format("other"), {}).body["runId"]
        refused = http.post(f"{RUNS.format('other')}/{live}/retry", {})
        assert refused.status == 409 and refused.body["error"]["type"] == "RunStateError"
        unknown = http.post(f"{runs}/{ids[0]}/retry", {"fromStep": "zzz"})
        assert unknown.status == 422
        (tmp_path / "fixed").touch()
        retried = http.post(f"{runs}/{ids[0]}/retry", {"fromStep": "b"})
        assert retried.status == 200 and retried.body == {"runId": ids[0]}
        assert _until(http, "pipe", ids[0], "completed")["attempt"] == 2
        history = http.get(f"{runs}/{ids[0]}/steps?includeSuperseded=true").body["items"]
        assert [(s["name"], s["superseded"]) for s in history] == [
            ("a", False), ("b", True), ("b", False)
        ]  # fmt: skip
        bulk = http.post("/v1/workflows/pipe/bulk/retry", {"status": "failed"})
        assert sorted(bulk.body["runIds"]) == sorted(ids[1:])
        fork = http.post(f"{runs}/{ids[0]}/fork", {"fromStep": "b", "input": {"again": 1}})
        assert fork.status == 201
        forked = _until(http, "pipe", fork.body["runId"], "completed")
        assert forked["input"] == {"again": 1} and forked["output"] == ["a", "b"]
        cancelled = http.post("/v1/workflows/other/bulk/cancel", {"status": "pending"})
        assert cancelled.body == {"runIds": [live]}


def test_a_run_streams_its_events_until_it_ends(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http, process(["worker", "rest_app:app"], env, tmp_path):
        run_id = http.post(RUNS.format("approval"), {"input": {"order": 1}}).body["runId"]
        path = f"{RUNS.format('approval')}/{run_id}"
        messages: list[tuple[str, dict[str, Any]]] = []

        def read() -> None:
            with urllib.request.urlopen(http.base + path + "/stream", timeout=60) as stream:
                assert stream.headers["Content-Type"].startswith("text/event-stream")
                kind = ""
                for raw in stream:
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        kind = line[len("event: ") :]
                    elif line.startswith("data: "):
                        messages.append((kind, json.loads(line[len("data: ") :])))

        reader = threading.Thread(target=read)
        reader.start()
        wait_for(lambda: any(kind == "waiting" for kind, _ in messages), 20)
        http.post(f"{path}/signals/approve", {"ok": 1})
        reader.join(timeout=30)
        assert not reader.is_alive()  # the stream ended with the run
        kinds = [kind for kind, _ in messages]
        assert kinds[0] == "created" and kinds[-1] == "completed"
        assert all(data["type"] == kind and "createdAt" in data for kind, data in messages)
        every = http.get(f"{path}/events?limit=1000").body["items"]
        assert [data for _, data in messages] == every
        assert http.get(f"{RUNS.format('approval')}/nope/stream").status == 404


def test_cancel_with_rollback_over_rest(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http, process(["worker", "rest_app:app"], env, tmp_path):
        run_id = http.post(RUNS.format("approval"), {"input": {"order": 3}}).body["runId"]
        _until(http, "approval", run_id, "waiting")
        reply = http.delete(f"{RUNS.format('approval')}/{run_id}?rollback=true")
        assert reply.body == {"runId": run_id, "cancelled": True}
        done = _until(http, "approval", run_id, "cancelled")
        assert done["error"]["compensated"] == []  # its one step has no rollback
        events = http.get(f"{RUNS.format('approval')}/{run_id}/events").body["items"]
        assert [e["type"] for e in events][-3:] == ["claimed", "compensated", "cancelled"]


def test_a_database_outage_answers_503_and_nothing_else_is_a_5xx(tmp_path: Path) -> None:
    class Unreachable:
        url = "postgresql://postgres@127.0.0.1:1/postgres"  # nothing listens on port 1
        schema = "perdure"

    env = environment(Unreachable, tmp_path)
    port = free_port()
    with process(["serve", "--port", str(port)], env, tmp_path):
        http = Http(f"http://127.0.0.1:{port}")
        reply = wait_for(lambda: _answer(http, "/healthz"), 20)
        assert reply is not None and reply.status == 503
        assert reply.body["error"]["type"] == "Unavailable"
        assert "cannot connect to PostgreSQL" in reply.body["error"]["message"]
        for path in (RUNS.format("greet"), "/v1/workflows", "/metrics"):
            assert http.get(path).status == 503
        assert http.post(RUNS.format("greet"), {"input": 1}).status == 503
        assert http.post(RUNS.format("bad%20name"), {}).status == 422  # bad input first


def _answer(http: Http, path: str) -> Reply | None:
    try:
        return http.get(path)
    except OSError:
        return None
