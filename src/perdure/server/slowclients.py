"""A deadline on each request's head: uvicorn's HTTP/1.1 protocol closes a connection
that sends no complete request line and headers within ``head_timeout`` seconds of
opening (or of its first byte after a previous request), so slow-header clients
cannot hold the server's connections."""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigurationError

__all__ = ["DEFAULT_HEAD_TIMEOUT", "head_timeout_protocol"]

#: Seconds a client has to send a request's line and headers, unless
#: ``perdure serve --header-timeout``.
DEFAULT_HEAD_TIMEOUT = 10.0


class _HeadDeadline(H11Protocol):
    head_timeout = DEFAULT_HEAD_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of a next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the head is in

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.info("closing a connection that sent no request head in time")
            self.transport.close()


def head_timeout_protocol(seconds: float = DEFAULT_HEAD_TIMEOUT) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a ``seconds`` deadline on each request's head (give it
    to ``uvicorn.run(http=...)``)."""
    if not seconds > 0:
        raise ConfigurationError(f"a header timeout must be positive, got {seconds}")
    return type("HeadDeadlineProtocol", (_HeadDeadline,), {"head_timeout": float(seconds)})
