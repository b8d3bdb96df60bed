"""Listing cursors: an opaque text naming the last run of a page.

A page is ordered newest first by the database's ``created_at``, the id breaking
ties, so a cursor holds both: the backend's own text for the time (exact, so the
next page neither skips nor repeats a run) and the id. Anything else given as a
cursor is a `ValidationError`.
"""

from __future__ import annotations

import base64
import binascii

from ..errors import ValidationError

__all__ = ["decode_cursor", "encode_cursor"]

_SEPARATOR = "\n"


def encode_cursor(created: str, run_id: str) -> str:
    """The cursor after the run created at ``created`` (backend text) with ``run_id``."""
    raw = f"{created}{_SEPARATOR}{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: object) -> tuple[str, str]:
    """``(created, run_id)`` from a cursor made by `encode_cursor`."""
    if not isinstance(cursor, str):
        raise ValidationError(f"cursor must be a string, got {type(cursor).__name__}")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, run_id = (
            base64.urlsafe_b64decode(padded.encode("ascii")).decode().split(_SEPARATOR)
        )
    except (UnicodeError, binascii.Error, ValueError):
        raise ValidationError(
            f"invalid cursor {cursor[:80]!r}: pass the next_cursor of a previous page"
        ) from None
    return created, run_id
