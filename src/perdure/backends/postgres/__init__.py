"""PostgreSQL backend (psycopg 3): see `PostgresBackend`."""

from __future__ import annotations

from .backend import PostgresBackend

__all__ = ["PostgresBackend"]
