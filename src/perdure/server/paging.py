"""Cursor pages over lists the API reads whole (a journal, an audit trail, workers):
the same ``{items, nextCursor}`` as the run listing, whose cursor the database keeps."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TypeVar

from ..errors import ValidationError

T = TypeVar("T")

__all__ = ["page_of"]


def page_of(items: Sequence[T], cursor: str | None, limit: int) -> tuple[list[T], str | None]:
    """The page after ``cursor`` (None: the first) and the cursor of the next one."""
    start = 0 if cursor is None else _offset(cursor)
    end = start + limit
    following = None if end >= len(items) else _cursor(end)
    return list(items[start:end]), following


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def _offset(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = text.partition(":")
        if kind == "o" and number.isdigit() and len(number) < 10:
            return int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ValidationError(f"cursor must be the nextCursor of a previous page, got {cursor!r:.80}")
