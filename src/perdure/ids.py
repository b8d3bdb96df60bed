"""Time-ordered run ids (ULIDs: 48-bit milliseconds + 80 random bits, Crockford base32)."""

from __future__ import annotations

import os
import re
import threading
import time

__all__ = ["is_run_id", "new_run_id", "new_worker_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RUN_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


_lock = threading.Lock()
_last = 0


def new_run_id(now_ms: int | None = None) -> str:
    """A new 26-character id that sorts by creation time.

    Within one process ids are strictly increasing, also within one millisecond (the
    random part is incremented, as the ULID spec's monotonic mode does).
    """
    global _last
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    if now_ms is None:
        with _lock:
            if value <= _last:
                value = _last + 1
            _last = value
    chars = []
    for _ in range(26):
        value, index = divmod(value, 32)
        chars.append(_ALPHABET[index])
    return "".join(reversed(chars))


def is_run_id(value: object) -> bool:
    """True if ``value`` has the shape of a run id (it may still name no run)."""
    return isinstance(value, str) and _RUN_ID.fullmatch(value) is not None


def new_worker_id() -> str:
    """A worker id: host-independent, unique per worker start."""
    return "w_" + new_run_id().lower()
