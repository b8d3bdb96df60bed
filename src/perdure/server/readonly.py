"""Read-only mode at the server's edge (``perdure serve --read-only``): every request
that could change state is refused before any route runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .errors import error_response

__all__ = ["ReadOnlyGuard", "refusal"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Methods that read only.
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
#: Posts that change no stored state: the dashboard's session.
SESSION = frozenset({"/login", "/logout"})


def refusal(method: str, path: str) -> str:
    """Why a request is refused in read-only mode."""
    return f"this server is read-only: {method} {path} would change the database, so it is refused"


class ReadOnlyGuard:
    """Answer 403 ``{"error": {"type": "ReadOnly", ...}}`` to every request but GET,
    HEAD and OPTIONS (and signing in or out of the dashboard), with nothing read from
    its body and nothing stored."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = str(scope.get("method", "GET")).upper()
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or method in SAFE or (method == "POST" and path in SESSION):
            await self.app(scope, receive, send)
            return
        await error_response(403, "ReadOnly", refusal(method, path))(scope, receive, send)
