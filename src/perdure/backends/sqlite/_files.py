"""The SQLite file: created private, or read when this process may not write it, and
a write refused as read-only named as such.

A read-only backend opens the file with SQLite's ``mode=ro``. In WAL mode a reader
still needs the ``-shm`` index beside the file: SQLite reads it if it exists and is
readable, or creates it if the directory is writable. When neither holds (a read-only
directory or mount, and no writer has the file open), SQLite refuses
(``SQLITE_READONLY_DIRECTORY`` or ``SQLITE_CANTOPEN``). If there is then no ``-wal``
with frames in it either, the file alone holds every commit, and it is opened with
``immutable=1``: read as it is, without locks or the index. With frames in a ``-wal``
that cannot be read without its index, opening it would lose commits, so it is
refused with the way out (a checkpoint by the file's owner).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from ...errors import BackendError, ReadOnlyDatabase, SchemaVersionError
from ._session import MIGRATIONS, QUERIES, Session

__all__ = ["ReadOnlySession", "check_schema", "create_private", "open_read_only", "refused_write"]

log = logging.getLogger("perdure.backends.sqlite")

_SQLITE_READONLY = 8
_SQLITE_CANTOPEN = 14
_SQLITE_READONLY_DBMOVED = 8 | (4 << 8)  # the file was moved or deleted: not read-only


def create_private(path: Path) -> None:
    """Create the database file readable by its owner only (0600) if it is missing.

    SQLite gives the ``-wal`` and ``-shm`` files it creates the database file's
    permissions, so every payload stays private. An existing file keeps its mode.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ReadOnlyDatabase(
                f"cannot create the SQLite file {path}: its directory is read-only "
                f"({exc.strerror})",
                str(path),
            ) from exc
        raise BackendError(f"cannot create the SQLite file {path}: {exc.strerror}") from exc
    os.close(fd)


def _uri(path: Path, *, immutable: bool) -> str:
    return f"file:{quote(str(path), safe='/')}?mode=ro" + ("&immutable=1" if immutable else "")


def open_read_only(
    path: Path, *, timeout: float, cached_statements: int
) -> tuple[sqlite3.Connection, bool]:
    """A read-only connection to ``path`` and whether it is immutable (see the module's
    docstring). A missing file is a `ReadOnlyDatabase` error: nothing is created."""
    if not path.is_file():
        raise ReadOnlyDatabase(
            f"no SQLite database at {path}: read-only mode opens an existing file only",
            str(path),
            opened_read_only=True,
        )
    for immutable in (False, True):
        conn = sqlite3.connect(
            _uri(path, immutable=immutable),
            uri=True,
            timeout=timeout,
            isolation_level=None,
            cached_statements=cached_statements,
        )
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn, immutable
        except sqlite3.OperationalError as exc:
            conn.close()
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if immutable or code not in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
                raise
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise ReadOnlyDatabase(
                    f"cannot read {path}: its write-ahead log {wal.name} holds commits, and "
                    f"its index {path.name}-shm is missing or not readable in a directory "
                    f"this process cannot write. Have the file's owner checkpoint it "
                    f"(sqlite3 {path} 'PRAGMA wal_checkpoint(TRUNCATE)'), or make the "
                    "-shm file readable",
                    str(path),
                    opened_read_only=True,
                ) from exc
            log.info(
                "%s: no -shm index can be made beside it (%s) and no -wal holds commits: "
                "reading it as immutable (later writes by others are not seen)",
                path,
                exc,
            )
    raise AssertionError("unreachable")  # pragma: no cover


class ReadOnlySession(Session):
    """A read-only backend's session: every write transaction is refused before it
    begins (SQLite would let one that happens to change nothing commit)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        clock: Callable[[], float],
        commit: Callable[[sqlite3.Connection], None],
        path: Path,
    ) -> None:
        super().__init__(conn, clock, commit)
        self.path = path

    @contextmanager
    def write(self) -> Iterator[float]:
        raise ReadOnlyDatabase(
            f"{self.path} is open read-only: this writes to it",
            str(self.path),
            opened_read_only=True,
        )
        yield 0.0  # pragma: no cover


def check_schema(s: Session, path: Path) -> int:
    """The file's schema version, without writing: `SchemaVersionError` when it has no
    perdure schema or an older one than this code."""
    latest = MIGRATIONS[-1].version if MIGRATIONS else 0
    found = s.one(QUERIES["schema_version_exists"], {})
    current = 0
    if found is not None and found["found"]:
        row = s.one(QUERIES["current_schema_version"], {})
        current = 0 if row is None else int(row["version"])
    if current == 0:
        raise SchemaVersionError(
            f"{path} has no perdure schema; read-only mode does not create one "
            "(run `perdure migrate` with write access first)"
        )
    if current < latest:
        raise SchemaVersionError(
            f"the schema of {path} is at version {current}, this perdure needs {latest}; "
            "read-only mode does not migrate: run `perdure migrate` with write access"
        )
    return current


def refused_write(exc: sqlite3.Error, path: Path, read_only: bool) -> ReadOnlyDatabase | None:
    """The `ReadOnlyDatabase` error for a write SQLite refused as read-only, else None."""
    code = getattr(exc, "sqlite_errorcode", 0)
    if code & 0xFF != _SQLITE_READONLY or code == _SQLITE_READONLY_DBMOVED:
        return None
    if read_only:
        return ReadOnlyDatabase(
            f"{path} is open read-only: this writes to it", str(path), opened_read_only=True
        )
    return ReadOnlyDatabase(
        f"{path} is read-only: this writes to it; use a writable file (to read it, open "
        "it read-only: App(read_only=True) or PERDURE_READ_ONLY=1)",
        str(path),
    )
