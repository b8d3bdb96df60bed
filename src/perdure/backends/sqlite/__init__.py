"""The SQLite backend (the embedded default): `SQLiteBackend`."""

from __future__ import annotations

from .backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
