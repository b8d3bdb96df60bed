"""A real `perdure serve` process (and a real worker) for the REST tests, and a tiny
HTTP client on the standard library."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PERDURE = [sys.executable, "-m", "perdure.cli.main"]

APP_MODULE = textwrap.dedent(
    """
    from perdure import App, Context

    app = App()

    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        return await ctx.step.run("greet", lambda: f"hi {name}")

    @app.workflow
    async def approval(ctx: Context, order: dict) -> dict:
        await ctx.step.run("reserve", lambda: order["order"])
        return await ctx.step.wait_for_event("approve")
    """
)


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]


class Http:
    """JSON over HTTP to one server."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        if data is None and method in ("POST", "PUT", "PATCH"):
            data = b"{}"  # the API takes changes as JSON only; {} is "nothing to say"
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, payload, got = answer.status, answer.read(), dict(answer.headers)
        except urllib.error.HTTPError as error:
            status, payload, got = error.code, error.read(), dict(error.headers)
        text = payload.decode()
        return Reply(status, json.loads(text) if text else None, got)

    def get(self, path: str) -> Reply:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.call("POST", path, body, **kw)

    def delete(self, path: str) -> Reply:
        return self.call("DELETE", path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(database: Any, folder: Path, **extra: str) -> dict[str, str]:
    (folder / "rest_app.py").write_text(APP_MODULE)
    env = dict(os.environ)
    env.pop("PERDURE_API_TOKENS", None)
    env.update(
        PERDURE_DATABASE_URL=database.url,
        PERDURE_SCHEMA=database.schema,
        PYTHONPATH=str(folder),
        **extra,
    )
    return env


@contextmanager
def process(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [*PERDURE, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def server(env: dict[str, str], cwd: Path, *args: str, token: str | None = None) -> Iterator[Http]:
    """``perdure serve`` on a free port, answering /healthz (or failing the test)."""
    port = free_port()
    with process(["serve", "--port", str(port), *args], env, cwd) as proc:
        http = Http(f"http://127.0.0.1:{port}", token)
        deadline = time.monotonic() + 20
        while True:
            try:
                if http.get("/healthz").status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"perdure serve did not come up:\n{out}")
            time.sleep(0.05)
        yield http


@dataclass
class Page:
    status: int
    text: str
    headers: dict[str, str]


class Dashboard:
    """The dashboard's pages and forms without a browser: it keeps the session cookie a
    page sends and the CSRF token its forms carry, and follows no redirect."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Page:
        host, port = self.base.removeprefix("http://").split(":")
        sent = {"Host": f"{host}:{port}", **(headers or {})}
        if self.cookies and "Cookie" not in sent:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request(method, path, body=body, headers=sent)
            answer = connection.getresponse()
            text = answer.read().decode()
            for name, value in answer.getheaders():
                if name.lower() == "set-cookie":
                    key, _, rest = value.partition("=")
                    self.cookies[key] = rest.split(";")[0]
                    if "Max-Age=0" in value or "expires=Thu, 01 Jan 1970" in value:
                        self.cookies.pop(key)
            found = re.search(r'name="csrf" value="([^"]*)"', text)
            if found:
                self.csrf = found.group(1)
            return Page(answer.status, text, {k.lower(): v for k, v in answer.getheaders()})
        finally:
            connection.close()

    def get(self, path: str, **headers: str) -> Page:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, fields: dict[str, str] | None = None, **headers: str) -> Page:
        """Post a form as a page of this server would (its Origin and CSRF token), unless
        ``headers`` or ``fields`` say otherwise."""
        form = {"csrf": self.csrf, **(fields or {})}
        sent = {
            "Origin": self.base,
            "Content-Type": "application/x-www-form-urlencoded",
            **{k.replace("_", "-"): v for k, v in headers.items()},
        }
        return self.request("POST", path, urllib.parse.urlencode(form).encode(), sent)


class RowCounter:
    """Counts the rows of every table of a test's database (SQLite file or PostgreSQL
    schema) in one query, from outside the server: what a refused request must not
    change. Keeps its connection open; `close` it."""

    def __init__(self, database: Any) -> None:
        self.kind = database.kind
        if self.kind == "sqlite":
            import sqlite3

            self._sqlite = sqlite3.connect(
                f"file:{database.path}?mode=ro", uri=True, check_same_thread=False
            )
            names = [
                row[0]
                for row in self._sqlite.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite_%'"
                )
            ]
            self._query: Any = " UNION ALL ".join(
                f"SELECT '{n}', count(*) FROM \"{n}\"" for n in names
            )
            return
        import psycopg
        from psycopg import sql

        self._pg = psycopg.connect(database.url, autocommit=True)
        names = [
            row[0]
            for row in self._pg.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = %s AND table_type = 'BASE TABLE'",
                (database.schema,),
            )
        ]
        self._query = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {}, count(*) FROM {}").format(
                sql.Literal(n), sql.Identifier(database.schema, n)
            )
            for n in names
        )

    def count(self) -> dict[str, int]:
        """Rows per table, now."""
        conn: Any = self._sqlite if self.kind == "sqlite" else self._pg
        return {name: number for name, number in conn.execute(self._query).fetchall()}

    def close(self) -> None:
        (self._sqlite if self.kind == "sqlite" else self._pg).close()


def stored_rows(database: Any) -> dict[str, int]:
    """Rows per table of the test's database, now (see `RowCounter`)."""
    counter = RowCounter(database)
    try:
        return counter.count()
    finally:
        counter.close()
