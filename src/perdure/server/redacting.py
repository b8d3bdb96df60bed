"""Redaction in the server: every record an answer carries (REST models, the Server-Sent
Events stream) has the serving App's configured keys masked (`perdure.redaction`)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..redaction import Redaction
from .models import SHOWN

__all__ = ["Redacting"]


class Redacting:
    """ASGI middleware: the request's answer is built under ``redaction`` (`SHOWN`),
    streaming bodies included, since they run in the same task."""

    def __init__(self, app: ASGIApp, redaction: Redaction) -> None:
        self.app = app
        self.redaction = redaction

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = SHOWN.set(self.redaction)
        try:
            await self.app(scope, receive, send)
        finally:
            SHOWN.reset(token)
