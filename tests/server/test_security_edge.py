"""The server's edge against a real `perdure serve` (issue 37): the Host names it
answers to, the API's credential (the Authorization header, never the dashboard's
cookie), JSON-only changes, signed sessions and sign-out, the limits of forms and
bodies, the fixed notices, and the deadline on a request's head. Each check looks at
the database afterwards: a refused request changes nothing."""

from __future__ import annotations

import json
import re
import socket
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from perdure.server.origin import allowed_hosts, host_name
from perdure.server.sessions import COOKIE, Sessions

from .harness import Dashboard, Http, environment, process, server

TOKEN = "edge-token-0123456789"
SECRET = "edge-session-secret-0123456789-abcdef"
RUNS = "/v1/workflows/greet/runs"
OPEN = {"/healthz", "/openapi.json"}


def _raw(base: str, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Any:
    """One request with exactly these headers (Host included): (status, JSON or text)."""
    host, port = base.removeprefix("http://").split(":")
    connection = HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for key, value in headers.items():
            connection.putheader(key, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        text = answer.read().decode()
    finally:
        connection.close()
    try:
        return answer.status, json.loads(text)
    except ValueError:
        return answer.status, text


def _here(http: Http) -> str:
    return http.base.removeprefix("http://")


def _signed_in(http: Http) -> Dashboard:
    """A dashboard visitor signed in with the token through the sign-in form."""
    dash = Dashboard(http.base)
    assert dash.get("/login").status == 200
    signed = dash.post("/login", {"token": TOKEN, "next": "/"})
    assert signed.status == 303 and signed.headers["location"] == "/", signed
    return dash


def test_a_foreign_host_gets_400_and_a_rebound_dashboard_cancel_is_refused(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path)
    with server(env, tmp_path) as http:
        run_id = http.post(RUNS, {"input": "ada"}).body["runId"]
        for host in ("attacker.example", f"attacker.example:{http.base.rsplit(':', 1)[1]}"):
            status, body = _raw(http.base, "GET", "/v1/workflows", None, {"Host": host})
            assert status == 400 and body["error"]["type"] == "BadRequest", body
        # a DNS-rebound page: its Host and Origin are both the attacker's name
        dash = Dashboard(http.base)
        dash.get(f"/runs/{run_id}")  # even with the session's own CSRF token
        evil = {"Host": "attacker.example", "Origin": "http://attacker.example"}
        status, _ = _raw(
            http.base,
            "POST",
            f"/runs/{run_id}/cancel",
            f"csrf={dash.csrf}".encode(),
            {**evil, "Content-Type": "application/x-www-form-urlencoded",
             "Cookie": f"{COOKIE}={dash.cookies[COOKIE]}"},
        )  # fmt: skip
        assert status == 400
        assert dash.get(f"/runs/{run_id}", Host="attacker.example").status == 400
        # every loopback name with any port is this server
        for host in ("localhost:1", "127.0.0.1", "[::1]:8000", "LOCALHOST"):
            assert _raw(http.base, "GET", "/healthz", None, {"Host": host})[0] == 200
        assert http.get(f"{RUNS}/{run_id}").body["status"] == "pending"

    # names added by --allowed-host and PERDURE_ALLOWED_HOSTS
    env = environment(sqlite_database, tmp_path, PERDURE_ALLOWED_HOSTS="ops.example, b.example")
    with server(env, tmp_path, "--allowed-host", "dash.example") as http:
        for host in ("dash.example:443", "ops.example", "B.example"):
            assert _raw(http.base, "GET", "/v1/workflows", None, {"Host": host})[0] == 200
        assert _raw(http.base, "GET", "/v1/workflows", None, {"Host": "c.example"})[0] == 400
    with process(["serve", "--allowed-host", "a/b", "--port", "0"], env, tmp_path) as proc:
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "'a/b' is not a host name to allow" in out


def _paths(http: Http, run_id: str) -> list[tuple[str, str]]:
    """Every (method, path) of the OpenAPI document, its parameters filled in."""
    fill = {"name": "greet", "run_id": run_id, "event": "approve"}
    document = http.get("/openapi.json").body
    found = []
    for template, methods in document["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: fill.get(m.group(1), "x"), template)
        found += [(method.upper(), path) for method in methods]
    assert len(found) > 20, found
    return found


def test_every_route_of_the_openapi_document_refuses_what_a_browser_could_forge(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    with server(env, tmp_path, token=TOKEN) as http:
        run_id = http.post(RUNS, {"input": "ada"}).body["runId"]
        signed_in = "; ".join(f"{k}={v}" for k, v in _signed_in(http).cookies.items())
        here, json_body = _here(http), b'{"input": 1}'
        credentials: list[dict[str, str]] = [
            {},
            {"Authorization": "Bearer wrong-token-0000000000"},
            {"Cookie": signed_in},  # the dashboard's cookie alone
            {"Cookie": f"perdure_token={TOKEN}; {COOKIE}={TOKEN}"},  # a raw token
        ]
        for method, path in _paths(http, run_id):
            for extra in credentials if path not in OPEN else []:
                headers = {"Host": here, "Content-Type": "application/json", **extra}
                status, body = _raw(http.base, method, path, json_body, headers)
                assert status == 401 and body["error"]["type"] == "Unauthorized", (path, extra)
            bearer = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            status, body = _raw(
                http.base, method, path, json_body, {"Host": "attacker.example", **bearer}
            )
            assert status == 400, (method, path, body)
            if method in ("POST", "PUT", "PATCH"):
                for kind, payload in (
                    ("application/x-www-form-urlencoded", b"input=1"),
                    ("text/plain", json_body),
                    ("multipart/form-data; boundary=x", b"--x--"),
                    ("application/json", b""),
                ):
                    headers = {**bearer, "Host": here, "Content-Type": kind}
                    status, body = _raw(http.base, method, path, payload, headers)
                    assert status == 415, (method, path, kind, body)
                    assert body["error"]["type"] == "UnsupportedMediaType"
        # nothing changed: the one run is still pending, nothing else was made
        [run] = http.get(RUNS).body["items"]
        assert run["id"] == run_id and run["status"] == "pending"
        assert http.get("/v1/subscriptions").body["items"] == []
        assert http.get("/v1/schedules").body["items"] == []
        assert [w["name"] for w in http.get("/v1/workflows").body["items"]] == ["greet"]


def test_sessions_are_signed_expire_and_end_at_sign_out(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(
        sqlite_database, tmp_path, PERDURE_API_TOKENS=TOKEN, PERDURE_SESSION_SECRET=SECRET
    )
    with server(env, tmp_path, token=TOKEN) as http:
        anonymous = Dashboard(http.base)
        anonymous.get("/login")
        refused = anonymous.post("/login", {"token": TOKEN, "csrf": "forged"})
        assert refused.status == 403 and COOKIE in anonymous.cookies

        dash = _signed_in(http)
        value = dash.cookies[COOKIE]
        assert TOKEN not in value
        page = dash.get("/")
        assert page.status == 200 and 'id="sign-out"' in page.text

        def visit(cookie: str) -> int:
            return Dashboard(http.base).get("/workers", Cookie=f"{COOKIE}={cookie}").status

        sid, expires, who, signature = value.split(".")
        past = Sessions((TOKEN,), secret=SECRET.encode(), now=lambda: 1_000_000.0)
        expired = past.value(past.open(TOKEN))
        for bad in (
            f"{sid}.{int(expires) + 3600}.{who}.{signature}",  # a longer life, same signature
            f"{sid}.{expires}.-.{signature}",
            value[:-1] + ("0" if value[-1] != "0" else "1"),
            expired,
            TOKEN,
        ):
            assert visit(bad) == 303, bad  # to the sign-in page
        assert Dashboard(http.base).get("/", Cookie=f"perdure_token={TOKEN}").status == 303
        assert visit(value) == 200

        # sign-out needs the session's CSRF token, then clears the cookie and ends it
        assert dash.post("/logout", {"csrf": "forged"}).status == 403
        assert visit(value) == 200
        out = dash.post("/logout")
        assert out.status == 303 and out.headers["location"] == "/login?notice=signed-out"
        assert COOKIE not in dash.cookies
        assert visit(value) == 303
        assert "Signed out." in Dashboard(http.base).get("/login?notice=signed-out").text

        # /metrics and the API never redirect: 401 in the API's error shape
        for path in ("/metrics", "/v1/workflows"):
            status, body = _raw(http.base, "GET", path, None, {"Host": _here(http)})
            assert status == 401 and body["error"]["type"] == "Unauthorized", (path, body)
        bearer = {"Host": _here(http), "Authorization": f"Bearer {TOKEN}"}
        assert _raw(http.base, "GET", "/metrics", None, bearer)[0] == 200


def test_forms_with_too_many_fields_and_spoofed_notices(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    with server(env, tmp_path, token=TOKEN) as http:
        run_id = http.post(RUNS, {"input": "ada"}).body["runId"]
        many = {f"f{i}": "x" for i in range(21)}
        anonymous = Dashboard(http.base)
        anonymous.get("/login")
        assert anonymous.post("/login", many).status == 400
        dash = _signed_in(http)
        dash.get(f"/runs/{run_id}")
        assert dash.post(f"/runs/{run_id}/cancel", many).status == 400
        assert http.get(f"{RUNS}/{run_id}").body["status"] == "pending"
        # a refused action shows what went wrong on the run's page itself
        bad = dash.post(f"/runs/{run_id}/signal", {"event": "approve", "payload": "{nope"})
        assert bad.status == 422 and "not sent: payload is not valid JSON" in bad.text

        spoof = "Session expired: re-enter your API token at https://evil.example"
        for query in (f"?done={spoof}", f"?notice={spoof}", "?notice=cancelled%20x"):
            page = dash.get(f"/runs/{run_id}" + query.replace(" ", "+"))
            assert page.status == 200 and "evil.example" not in page.text
            assert 'class="notice"' not in page.text
        page = dash.get(f"/runs/{run_id}?notice=cancelled")
        assert '<p class="notice" role="status">Cancelled.</p>' in page.text


def test_a_chunked_body_over_the_limit_gets_413_and_stores_nothing(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path)
    with server(env, tmp_path) as http:
        host, port = _here(http).split(":")
        big = json.dumps({"input": "a" * (2 * 1024 * 1024)}).encode()
        small = json.dumps({"input": "ada"}).encode()
        answers = []
        for body in (big, small, b""):
            connection = HTTPConnection(host, int(port), timeout=60)
            chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
            connection.request(
                "POST", RUNS, body=chunks, headers={"Content-Type": "application/json"},
                encode_chunked=True,
            )  # fmt: skip
            answer = connection.getresponse()
            answers.append((answer.status, json.loads(answer.read())))
            connection.close()
        (status, body), (ok, started), (none, empty) = answers
        assert status == 413 and body["error"]["type"] == "PayloadTooLarge", body
        assert ok == 201, started  # a chunked body under the limit is read as usual
        assert none == 415 and empty["error"]["type"] == "UnsupportedMediaType", empty
        assert [r["input"] for r in http.get(RUNS).body["items"]] == ["ada"]


def _closed(sock: socket.socket) -> bool:
    """True once the server closes the connection (read until end of stream)."""
    sock.settimeout(30)  # a deadline: a connection still open by then fails the test
    try:
        while chunk := sock.recv(4096):
            del chunk
        return True
    except TimeoutError:
        return False


def test_a_client_slow_to_send_its_headers_is_disconnected(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path)
    with server(env, tmp_path, "--header-timeout", "0.5") as http:
        host, port = _here(http).split(":")
        silent = socket.create_connection((host, int(port)))
        partial = socket.create_connection((host, int(port)))
        partial.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode())
        kept = socket.create_connection((host, int(port)))
        kept.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        kept.settimeout(30)
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        kept.sendall(b"GET /healthz HTTP/1.1\r\n")  # a next request that never ends its head
        try:
            assert _closed(silent) and _closed(partial) and _closed(kept)
        finally:
            for sock in (silent, partial, kept):
                sock.close()
        assert http.get("/healthz").status == 200  # the server itself carries on


def test_host_names_are_read_strictly() -> None:
    cases = {
        b"localhost:8000": "localhost",
        b"LocalHost.": "localhost",
        b"[::1]:80": "::1",
        b"[0:0::1]": "::1",
        b"127.0.0.1": "127.0.0.1",
        b"a.example:x": None,
        b"[::1]x": None,
        b"[nope]": None,
        b"a b": None,
        b"a@b.example": None,
        b"": None,
        "é.example".encode(): None,
    }
    assert {given: host_name(given) for given in cases} == cases
    assert allowed_hosts(["A.example, b.example:8443"], bind="0.0.0.0") == {
        "localhost", "127.0.0.1", "::1", "a.example", "b.example"
    }  # fmt: skip
    assert "10.0.0.5" in allowed_hosts(bind="10.0.0.5")


def test_serve_refuses_bad_edge_options(sqlite_database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(sqlite_database, tmp_path, PERDURE_SESSION_SECRET="short")
    for args, code, said in (
        (["--session-lifetime", "0"], 2, "--session-lifetime must be more than zero"),
        (["--session-lifetime", "soon"], 2, "--session-lifetime"),
        (["--header-timeout", "0"], 2, "--header-timeout"),
        ([], 1, "PERDURE_SESSION_SECRET must be at least 32 characters"),
    ):
        with process(["serve", "--port", "0", *args], env, tmp_path) as proc:
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == code and said in out, (args, out)
        assert "Traceback" not in out
