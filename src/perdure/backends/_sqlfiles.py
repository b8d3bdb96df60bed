"""Load named SQL queries and ordered migrations shipped as package data.

A queries file holds blocks that each start with a header line ``-- name: <name>``;
the block's text up to the next header is the query (comments included). Migration
files are named ``NNNN_description.sql`` and applied in number order. Function files
(``sql/functions/*.sql``, PostgreSQL) are applied in name order, as a set, whenever
their text changes (see `function_set`); a function may run a query of
``queries.sql`` as one of its statements, written ``{{query <name>}}``, its
``%(param)s`` placeholders read from the function's record ``t`` (``t.param``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString, cast

from ..errors import SchemaVersionError

__all__ = [
    "FunctionSet",
    "Migration",
    "compact",
    "function_set",
    "load_migrations",
    "load_queries",
    "parse_queries",
]

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(\w+)\}\}")
_QUERY = re.compile(r"\{\{query (\w+)\}\}")
_PARAM = re.compile(r"%\((\w+)\)s")
_TRAILING_COMMENT = re.compile(r"\s+--\s.*$")
_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: its version number, file name and SQL text."""

    version: int
    name: str
    sql: LiteralString


def parse_queries(text: str) -> dict[str, LiteralString]:
    """Split a queries file into ``{name: sql}``; duplicate names are an error.

    A query may include another block of the same file with ``{{name}}`` (a part
    several queries share, such as the columns of a run), expanded here, once, from
    the file's own text."""
    queries: dict[str, str] = {}
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = compact(body)

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in queries:
            raise ValueError(f"{{{{{name}}}}} names no query of the file")
        if _INCLUDE.search(queries[name]):
            raise ValueError(f"{{{{{name}}}}} includes another part: one level only")
        return queries[name]

    return {
        name: cast(LiteralString, _INCLUDE.sub(expand, sql))  # type: ignore[redundant-cast]
        for name, sql in queries.items()
    }


def compact(sql: str) -> str:
    """The query without comments, indentation and blank lines.

    What goes over the wire is smaller, and psycopg caches the parsing of queries
    only up to 4 KB, which the longest transition statement stays under this way.
    Queries must not hold ``--`` or line breaks inside string literals.
    """
    lines = (line.strip() for line in sql.splitlines())
    kept = (_TRAILING_COMMENT.sub("", line) for line in lines if line and not line.startswith("--"))
    return "\n".join(kept)


def load_queries(package: str, file: str = "queries.sql") -> dict[str, LiteralString]:
    """Load ``<package>/sql/queries.sql`` (or another file of named blocks there)."""
    text = resources.files(package).joinpath("sql", file).read_text("utf-8")
    return parse_queries(text)


def load_migrations(package: str) -> list[Migration]:
    """Load ``<package>/sql/migrations/*.sql`` in version order (versions must be 1..n:
    a gap would let a database at a later version skip the missing one for good)."""
    folder = resources.files(package).joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append(
                Migration(
                    int(match.group(1)),
                    entry.name,
                    cast(LiteralString, entry.read_text("utf-8")),  # type: ignore[redundant-cast]
                )
            )
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(
            f"migrations of {package} must be numbered 1..n, each once: {[m.name for m in found]}"
        )
    return found


@dataclass(frozen=True, slots=True)
class FunctionSet:
    """The function files of a backend, in apply order, and a digest of their text."""

    files: tuple[tuple[str, LiteralString], ...]
    digest: str

    def text_of(self, name: str) -> LiteralString:
        """The text of one file of the set."""
        for file_name, text in self.files:
            if file_name == name:
                return text
        raise KeyError(name)


def function_set(package: str) -> FunctionSet:
    """Load ``<package>/sql/functions/*.sql`` in name order (``{{query <name>}}``
    expanded: see the module's docstring)."""
    folder = resources.files(package).joinpath("sql", "functions")
    queries = load_queries(package)

    def included(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in queries:
            raise ValueError(f"{{{{query {name}}}}} names no query of queries.sql")
        return _PARAM.sub(r"t.\1", queries[name])

    entries = sorted(
        (entry.name, _QUERY.sub(included, entry.read_text("utf-8")))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    digest = hashlib.sha256()
    for name, text in entries:
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    files = tuple((name, cast(LiteralString, text)) for name, text in entries)  # type: ignore[redundant-cast]
    return FunctionSet(files, digest.hexdigest())


def pending_migrations(migrations: list[Migration], current: int) -> list[Migration]:
    """The migrations a schema at version ``current`` still needs, in order; a schema
    newer than every migration this perdure knows is refused (`SchemaVersionError`)."""
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise SchemaVersionError(
            f"database schema version {current} is newer than this perdure "
            f"(knows up to {latest}): upgrade perdure"
        )
    return [m for m in migrations if m.version > current]
