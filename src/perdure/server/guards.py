"""What every request passes first: the body size limit and, when tokens are set, a
bearer token; and the rule that a server with no tokens listens on loopback only."""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlencode

from ..errors import ConfigurationError

__all__ = ["BodyLimit", "TokenCheck", "check_bind", "load_tokens"]

#: Request bodies over this many bytes answer 413.
MAX_BODY = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def load_tokens(value: str | None = None) -> tuple[str, ...]:
    """The API tokens: ``PERDURE_API_TOKENS`` (or ``value``), comma-separated, so two
    can be live while one replaces the other."""
    raw = os.environ.get("PERDURE_API_TOKENS", "") if value is None else value
    tokens = tuple(t.strip() for t in raw.split(",") if t.strip())
    for token in tokens:
        if len(token) < 16:
            raise ConfigurationError("each API token must be at least 16 characters long")
    return tokens


def check_bind(host: str, tokens: tuple[str, ...]) -> None:
    """Refuse to listen beyond this machine without tokens."""
    if tokens or _loopback(host):
        return
    raise ConfigurationError(
        f"refusing to listen on {host!r} without API tokens: anyone who can reach it could "
        "start and cancel runs. Set PERDURE_API_TOKENS (comma-separated, 16+ characters "
        "each) or listen on 127.0.0.1"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _send_error(send: Send, status: int, type_: str, message: str, **headers: str) -> None:
    body = json.dumps({"error": {"type": type_, "message": message}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


#: A refused body is read (and dropped) up to this size before the 413, so the client
#: is still sending when it reads the answer instead of hitting a closed connection.
_DRAIN = 16 * 1024 * 1024


async def _drain(receive: Receive) -> None:
    read = 0
    while read <= _DRAIN:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class BodyLimit:
    """Answer 413 to a request whose body is over ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _drain(receive)
            await _send_error(send, 413, "PayloadTooLarge", self._message())
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await _drain(receive)
                await _send_error(send, 413, "PayloadTooLarge", self._message())

    def _message(self) -> str:
        return f"the request body is over {self.limit // 1024} KiB"


class TokenCheck:
    """With tokens set, every request but ``/healthz``, the OpenAPI document, the
    dashboard's sign-in page and its static files needs a token: as
    ``Authorization: Bearer <token>`` (the API), or in the dashboard's cookie. A
    dashboard page asked for without one redirects to the sign-in page. Tokens are
    compared in constant time."""

    OPEN = ("/healthz", "/openapi.json", "/login")
    COOKIE = b"perdure_token"

    def __init__(self, app: ASGIApp, tokens: tuple[str, ...]) -> None:
        self.app = app
        self.tokens = tuple(t.encode() for t in tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if (
            scope["type"] != "http"
            or not self.tokens
            or path in self.OPEN
            or path.startswith("/static/")
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        header = headers.get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        if scheme.lower() == b"bearer" and self.known(given.strip()):
            await self.app(scope, receive, send)
            return
        if not header and self.known(_cookie(headers.get(b"cookie", b""), self.COOKIE)):
            await self.app(scope, receive, send)
            return
        if not path.startswith("/v1/") and scope.get("method") == "GET" and not header:
            target = "/login?" + urlencode({"next": path})
            await send({"type": "http.response.start", "status": 303,
                        "headers": [(b"location", target.encode())]})  # fmt: skip
            await send({"type": "http.response.body", "body": b""})
            return
        message = (
            "a bearer token is required: send Authorization: Bearer <token>"
            if not header
            else "the token is not valid"
        )
        await _send_error(send, 401, "Unauthorized", message, **{"WWW-Authenticate": "Bearer"})

    def known(self, given: bytes) -> bool:
        """True if ``given`` is one of the tokens."""
        if not given:
            return False
        return self._known(given)

    def _known(self, given: bytes) -> bool:
        matched = False
        for token in self.tokens:  # every token compared, whichever matches
            matched |= hmac.compare_digest(given, token)
        return matched


def _cookie(header: bytes, name: bytes) -> bytes:
    for part in header.split(b";"):
        key, _, value = part.strip().partition(b"=")
        if key == name:
            return value
    return b""
