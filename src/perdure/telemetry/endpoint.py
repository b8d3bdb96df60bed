"""A worker's ``/metrics`` endpoint: a small HTTP server on the worker's own event
loop (no thread), answering ``GET /metrics`` with the process's counters and the
database's gauges read at scrape time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from ..backends.base import Backend
from ..errors import BackendError, ConfigurationError
from ..records import QueueGauge
from .exposition import CONTENT_TYPE, render, require
from .live import enable_metrics

__all__ = ["MetricsEndpoint", "serve_metrics"]

log = logging.getLogger("perdure.worker")

_MAX_REQUEST = 16 * 1024


class MetricsEndpoint:
    """Serves ``GET /metrics`` on ``host:port`` (port 0: any free port, see `port`)."""

    def __init__(
        self,
        backend: Backend,
        workflows: Sequence[str],
        port: int,
        host: str = "127.0.0.1",
    ) -> None:
        self._backend = backend
        self._workflows = tuple(dict.fromkeys(workflows))
        self._host = host
        self._wanted = port
        self._server: asyncio.Server | None = None
        self.port: int | None = None
        self._store = enable_metrics()

    async def start(self) -> None:
        """Listen (a port in use, or no prometheus-client, is a `ConfigurationError`)."""
        require()
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._wanted)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {self._host}:{self._wanted}: {exc}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving metrics at http://%s:%d/metrics", self._host, self.port)

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def body(self) -> bytes:
        """The current metrics in the text format."""
        gauges: list[QueueGauge] | None
        try:
            gauges = await self._backend.queue_gauges()
        except BackendError as exc:
            log.warning("metrics: could not read the database gauges: %s", exc)
            gauges = None
        return render(self._store, gauges, self._workflows)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._answer(reader, writer.write, self.body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:
            log.exception("metrics endpoint: internal error")
        finally:
            writer.close()

    @staticmethod
    async def _answer(
        reader: asyncio.StreamReader,
        write: Callable[[bytes], object],
        body: Callable[[], Awaitable[bytes]],
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_REQUEST:
            write(_response(431, b"request header too large\n", "text/plain"))
            return
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            write(_response(405, b"only GET /metrics\n", "text/plain"))
            return
        path = parts[1].split(b"?", 1)[0]
        if path not in (b"/metrics", b"/"):
            write(_response(404, b"not found: try /metrics\n", "text/plain"))
            return
        data = await body()
        write(_response(200, b"" if parts[0] == b"HEAD" else data, CONTENT_TYPE, len(data)))


async def serve_metrics(
    backend: Backend, workflows: Sequence[str], at: tuple[str, int] | None
) -> MetricsEndpoint | None:
    """A started endpoint for a worker serving ``workflows``, listening at ``at``
    (host, port); None when ``at`` is None."""
    if at is None:
        return None
    host, port = at
    endpoint = MetricsEndpoint(backend, workflows, port, host)
    await endpoint.start()
    return endpoint


def _response(status: int, data: bytes, content_type: str, length: int | None = None) -> bytes:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Too Large"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(data) if length is None else length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + data
