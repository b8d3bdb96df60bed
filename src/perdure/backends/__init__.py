"""Backends: `open_backend(url)` picks one by URL scheme; drivers are imported lazily."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError, MissingDependencyError
from .base import Backend

__all__ = ["Backend", "create_backend", "redact_url"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def create_backend(url: str, *, schema: str = "perdure", read_only: bool = False) -> Backend:
    """Build (not yet open) the backend for ``url`` (``read_only``: it never writes).

    ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite:///:memory:``
    is not supported (a file is needed for several connections); ``postgresql://``
    and ``postgres://`` URLs go to PostgreSQL, with ``schema`` naming the schema.
    """
    if not isinstance(url, str) or not url:
        raise ConfigurationError("the database URL must be a non-empty string")
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        parts = urlsplit(url)
        if not url.startswith("sqlite:///"):
            raise ConfigurationError(
                "SQLite URLs look like sqlite:///relative/path.db or "
                f"sqlite:////abs/path.db, got {url!r}"
            )
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise ConfigurationError(
                f"the SQLite URL {url!r} has a query or fragment, which perdure does not "
                "take (no option would be applied); give only the file, as "
                "sqlite:///path/to/file.db"
            )
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
        if not path or path == ":memory:":
            raise ConfigurationError(
                "perdure needs an SQLite file (several connections share it), not :memory:"
            )
        from .sqlite import SQLiteBackend

        return SQLiteBackend(Path(path), read_only=read_only)
    if scheme in ("postgresql", "postgres"):
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"schema {schema!r} is not a valid name: use lowercase letters, digits and _"
            )
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError:
            raise MissingDependencyError("psycopg", "postgres") from None
        from .postgres import PostgresBackend

        return PostgresBackend(url, schema=schema, read_only=read_only)
    raise ConfigurationError(
        f"unsupported database URL {redact_url(url)!r}: use sqlite:///file.db or postgresql://..."
    )


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for messages and logs)."""
    return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", url)
