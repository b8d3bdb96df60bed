"""What the server's edge middlewares share: the one shape of a refusal, sent before
any route runs."""

from __future__ import annotations

import json

from starlette.types import Send

__all__ = ["send_error"]


async def send_error(send: Send, status: int, type_: str, message: str, **headers: str) -> None:
    """Answer ``{"error": {"type", "message"}}`` with ``status`` (the API's error shape)."""
    body = json.dumps({"error": {"type": type_, "message": message}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
