"""Log output: rate limiting of repeated warnings, and the JSON line format.

Rate limiting, so an outage does not flood the logs:

While the database is down, every worker component (claims, commits, heartbeats,
the listener, psycopg's pool) fails in a loop; one line per failure would be many
lines per second. `quiet_repeats` lets the first warning of each kind through, then
at most one per interval, noting how many were held back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime

__all__ = ["JsonFormatter", "RateLimit", "configure", "quiet_repeats"]

#: Record fields perdure sets with ``extra=`` (worker lines, ``ctx.log``).
_FIELDS = ("run_id", "workflow", "step", "outcome", "reason")

#: loggers a worker rate-limits: its own, and psycopg's connection pool.
WORKER_LOGGERS = (
    "perdure.worker",
    "perdure.engine",
    "perdure.backends.postgres",
    "perdure.backends.sqlite",
    "psycopg.pool",
)


class RateLimit(logging.Filter):
    """Passes at most one WARNING-or-worse record per (logger, message) per ``interval``
    seconds; lower levels always pass."""

    def __init__(self, interval: float = 5.0) -> None:
        super().__init__()
        self.interval = interval
        self._lock = threading.Lock()
        self._last: dict[tuple[str, object], float] = {}
        self._held: dict[tuple[str, object], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.msg)
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like this in the last {self.interval:g}s)"
        return True


_installed = RateLimit()


def quiet_repeats(names: tuple[str, ...] = WORKER_LOGGERS) -> None:
    """Install the shared rate limit on these loggers (idempotent)."""
    for name in names:
        logger = logging.getLogger(name)
        if _installed not in logger.filters:
            logger.addFilter(_installed)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC ISO 8601), ``level``, ``logger``,
    ``message``, the run fields perdure sets (``run_id``, ``workflow``, ``step``,
    ``outcome``, ``reason``) when present, and ``exception`` with a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(level: int, log_format: str = "text") -> None:
    """Set up the root logger for a command line process: ``text`` (one readable line
    per record) or ``json`` (one JSON object per line, for log shippers)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
