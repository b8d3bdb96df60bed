"""Where a request may come from: the Host names this server answers to (so a DNS
rebinding page reaches nothing), the JSON-only rule for changes through the API (so
no cross-site form or ``no-cors`` fetch can make one), and the same-origin check of
the dashboard's forms."""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigurationError
from .asgi import send_error

__all__ = ["HostCheck", "JsonOnly", "allowed_hosts", "host_name", "same_origin"]

log = logging.getLogger("perdure.server")

#: The names every server answers to: this machine's own.
LOOPBACK = ("localhost", "127.0.0.1", "::1")
#: Methods whose ``/v1`` requests must carry a JSON body.
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


def allowed_hosts(given: Iterable[str] = (), *, bind: str = "127.0.0.1") -> frozenset[str]:
    """The Host names the server answers to: loopback names, the address it listens on
    (unless a wildcard), ``given`` and ``PERDURE_ALLOWED_HOSTS`` (comma-separated;
    ``*`` for any, which reopens DNS rebinding)."""
    names = {*LOOPBACK}
    raw = [*given, *os.environ.get("PERDURE_ALLOWED_HOSTS", "").split(",")]
    for entry in (part.strip() for value in raw for part in value.split(",")):
        if not entry:
            continue
        name = host_name(entry.encode()) if entry != "*" else "*"
        if name is None:
            raise ConfigurationError(f"{entry!r} is not a host name to allow")
        names.add(name)
    if bind not in ("0.0.0.0", "::", ""):  # a wildcard is no name clients use
        names.add(bind.strip("[]").lower())
    if "*" in names:
        log.warning("the server answers to any Host name: DNS rebinding can reach it")
    return frozenset(names)


def host_name(value: bytes) -> str | None:
    """The name of a Host header without its port, lower case (``[::1]:80`` -> ``::1``);
    None if it is not one."""
    try:
        text = value.decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        try:
            return str(ipaddress.IPv6Address(name))
        except ValueError:
            return None
    name, colon, port = text.partition(":")
    if colon and not port.isdigit():
        return None
    name = name.removesuffix(".")
    if not name or not all(c.isalnum() or c in "-._" for c in name):
        return None
    return name


class HostCheck:
    """Answer 400 to a request whose ``Host`` is not one the server answers to."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts
        self.any = "*" in hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"host"), b"")
        if host_name(given) in self.hosts:
            await self.app(scope, receive, send)
            return
        shown = given.decode("ascii", "replace")[:100]
        await send_error(
            send,
            400,
            "BadRequest",
            f"this server does not answer to the Host {shown!r}; "
            "add it with --allowed-host or PERDURE_ALLOWED_HOSTS",
        )


class JsonOnly:
    """Answer 415 to a POST, PUT or PATCH under ``/v1/`` without a JSON body: a page of
    another site can send a form or a ``no-cors`` fetch, never
    ``Content-Type: application/json`` without the preflight this server never grants."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in _WITH_BODY
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        kind = headers.get(b"content-type", b"").partition(b";")[0].strip().lower()
        length = headers.get(b"content-length")
        chunked = length is None and b"transfer-encoding" in headers
        empty = length == b"0" or (length is None and not chunked)
        if kind == b"application/json" and not empty:
            if chunked:  # an empty chunked body is no body either
                first = await receive()
                if first["type"] == "http.request" and not first.get("body"):
                    empty = not first.get("more_body", False)
                receive = _replaying(first, receive)
            if not empty:
                await self.app(scope, receive, send)
                return
        await send_error(
            send,
            415,
            "UnsupportedMediaType",
            f"{scope['method']} needs a JSON body: send Content-Type: application/json "
            "and a body ({} for none)",
        )


def _replaying(first: Message, receive: Receive) -> Receive:
    """``receive`` with ``first`` given back first."""
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def same_origin(request: Request) -> bool:
    """True if the request comes from a page of this server (its ``Origin``, else its
    ``Referer``)."""
    origin = request.headers.get("origin") or request.headers.get("referer") or ""
    here = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin == here or origin.startswith(here + "/")
