"""Who may ask: when tokens are set, a bearer token (the API) or a signed-in session
(the dashboard); the body size limit; and the rule that a server with no tokens
listens on loopback only. Where a request may come from is `origin`'s."""

from __future__ import annotations

import hmac
import ipaddress
import os
from urllib.parse import urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigurationError
from .asgi import send_error
from .sessions import Sessions

__all__ = ["BodyLimit", "TokenCheck", "check_bind", "load_tokens", "token_known"]

#: Request bodies over this many bytes answer 413.
MAX_BODY = 1024 * 1024


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


#: A refused body is read (and dropped) up to this size before the 413, so the client
#: is still sending when it reads the answer instead of hitting a closed connection.
_DRAIN = 16 * 1024 * 1024


async def _drain(receive: Receive, read: int = 0) -> None:
    while read <= _DRAIN:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class BodyLimit:
    """Answer 413 to a request whose body is over ``limit`` bytes, declared or streamed.

    A body without a length (``Transfer-Encoding: chunked``) is read here, up to the
    limit, before any route sees it: a route's own body parsing would turn the refusal
    into some other error."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await _drain(receive)
                await send_error(send, 413, "PayloadTooLarge", self._message())
                return
            await self.app(scope, receive, send)  # the server reads no more than declared
            return
        if b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await _drain(receive, seen)
                await send_error(send, 413, "PayloadTooLarge", self._message())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _message(self) -> str:
        return f"the request body is over {self.limit // 1024} KiB"


class TokenCheck:
    """With tokens set, every request but ``/healthz``, the OpenAPI document, the
    dashboard's sign-in and sign-out and its static files needs a credential:

    - the API (``/v1/...``) and ``/metrics``: ``Authorization: Bearer <token>`` only,
      else 401 (never the dashboard's cookie, so no other page can use it);
    - the dashboard: a signed-in session cookie (`Sessions`) or the header; a page
      asked for without one redirects to the sign-in page.

    Tokens are compared in constant time."""

    OPEN = ("/healthz", "/openapi.json", "/login", "/logout")

    def __init__(self, app: ASGIApp, tokens: tuple[str, ...], sessions: Sessions) -> None:
        self.app = app
        self.tokens = tuple(t.encode() for t in tokens)
        self.sessions = sessions

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
        api = path.startswith("/v1/") or path == "/metrics"
        if not api and not header:
            cookie = headers.get(b"cookie", b"").decode("latin-1")
            session = self.sessions.from_header(cookie)
            if session is not None and session.signed_in:
                await self.app(scope, receive, send)
                return
            if scope.get("method") == "GET":
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
        await send_error(send, 401, "Unauthorized", message, **{"WWW-Authenticate": "Bearer"})

    def known(self, given: bytes) -> bool:
        """True if ``given`` is one of the tokens."""
        return token_known(self.tokens, given)


def token_known(tokens: tuple[bytes, ...], given: bytes) -> bool:
    """True if ``given`` is one of ``tokens``, compared in constant time."""
    if not given:
        return False
    matched = False
    for token in tokens:  # every token compared, whichever matches
        matched |= hmac.compare_digest(given, token)
    return matched
