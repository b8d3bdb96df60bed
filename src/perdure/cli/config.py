"""The project's config file: ``[tool.perdure]`` in ``pyproject.toml``, or ``perdure.toml``.

The CLI reads it once, before a command runs; the library never reads files. The
file is found upward from the working directory (in each directory ``perdure.toml``
first, then a ``pyproject.toml`` that has a ``[tool.perdure]`` table), unless
``--config`` or ``PERDURE_CONFIG`` names one. Unknown keys and wrong types are one
`ConfigurationError` naming the file and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

__all__ = [
    "ProjectConfig",
    "ServerConfig",
    "TelemetryConfig",
    "WorkerConfig",
    "find_config",
    "load_config",
    "read_config",
]

CONFIG_FILE = "perdure.toml"
PYPROJECT = "pyproject.toml"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """``[worker]``: defaults of ``perdure worker`` (its flags win)."""

    concurrency: int | None = None
    workflows: tuple[str, ...] = ()
    lease: str | float | None = None
    poll_interval: float | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """``[server]``: defaults of ``perdure serve`` (its flags win)."""

    host: str | None = None
    port: int | None = None
    allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """``[telemetry]``: the worker's metrics endpoint and the ``OTEL_*`` defaults
    (a variable that is set wins over the file)."""

    metrics_port: int | None = None
    metrics_host: str | None = None
    service_name: str | None = None
    traces_exporter: str | None = None
    otlp_endpoint: str | None = None

    def otel_env(self) -> dict[str, str]:
        """The ``OTEL_*`` variables these settings stand for."""
        pairs = {
            "OTEL_SERVICE_NAME": self.service_name,
            "OTEL_TRACES_EXPORTER": self.traces_exporter,
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint,
        }
        return {k: v for k, v in pairs.items() if v is not None}


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """What a config file holds; the empty config when there is no file.

    ``paths`` are relative to ``root``, the file's directory (discovery imports the
    modules under them minus the ``ignore`` globs when no ``app`` is named). A
    relative ``sqlite:///`` URL in the file is made relative to ``root`` too, so every
    command of the project, from any of its directories, uses the same database."""

    path: Path | None = None
    root: Path | None = None
    database_url: str | None = None
    schema: str | None = None
    app: str | None = None
    paths: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)


def find_config(start: Path) -> Path | None:
    """The config file that applies in ``start``: the nearest ``perdure.toml``, or
    ``pyproject.toml`` with a ``[tool.perdure]`` table, in it or a parent."""
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = directory / PYPROJECT
        if pyproject.is_file() and "perdure" in _parse(pyproject).get("tool", {}):
            return pyproject
    return None


def load_config(explicit: str | None, cwd: Path) -> ProjectConfig:
    """The config of ``--config``/``PERDURE_CONFIG`` when given (it must exist), else
    the one found upward from ``cwd``, else the empty config."""
    if explicit:
        path = Path(explicit)
        if not path.is_absolute():
            path = cwd / path
        if not path.is_file():
            raise ConfigurationError(f"config file {explicit} does not exist")
        return read_config(path)
    found = find_config(cwd)
    return ProjectConfig() if found is None else read_config(found)


def read_config(path: Path) -> ProjectConfig:
    """Read and check one config file."""
    data = _parse(path)
    if path.name == PYPROJECT:
        tool = data.get("tool", {})
        if not isinstance(tool, dict) or "perdure" not in tool:
            raise ConfigurationError(f"{path}: has no [tool.perdure] table")
        data, prefix = tool["perdure"], "tool.perdure."
    else:
        prefix = ""
    reader = _Reader(path, prefix)
    return reader.project(data)


def _parse(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot be read: {exc.strerror}") from None


_Check = Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_text(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def _is_texts(v: Any) -> bool:
    return isinstance(v, list) and all(_is_text(x) for x in v)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def _is_port(v: Any) -> bool:
    return _is_int(v) and 0 <= v <= 65535


def _is_duration(v: Any) -> bool:
    return _is_text(v) or _is_number(v)


def _is_positive(v: Any) -> bool:
    return _is_int(v) and v >= 1


#: Each table's keys: what a value must be, said in the error when it is not.
_TOP: dict[str, tuple[_Check, str]] = {
    "database_url": (_is_text, "a database URL (text)"),
    "schema": (_is_text, "a schema name (text)"),
    "app": (_is_text, "module:attribute (text)"),
    "paths": (_is_texts, "a list of paths (text)"),
    "ignore": (_is_texts, "a list of glob patterns (text)"),
}
_TABLES: dict[str, dict[str, tuple[_Check, str]]] = {
    "worker": {
        "concurrency": (_is_positive, "an integer >= 1"),
        "workflows": (_is_texts, "a list of workflow name globs (text)"),
        "lease": (_is_duration, "a duration (30s, 5m, or seconds)"),
        "poll_interval": (_is_number, "seconds > 0"),
    },
    "server": {
        "host": (_is_text, "an address (text)"),
        "port": (_is_port, "a port number from 0 to 65535"),
        "allowed_hosts": (_is_texts, "a list of host names (text)"),
    },
    "telemetry": {
        "metrics_port": (_is_port, "a port number from 0 to 65535"),
        "metrics_host": (_is_text, "an address (text)"),
        "service_name": (_is_text, "text"),
        "traces_exporter": (_is_text, "text"),
        "otlp_endpoint": (_is_text, "a URL (text)"),
    },
}


class _Reader:
    def __init__(self, path: Path, prefix: str) -> None:
        self.path = path
        self.prefix = prefix

    def _check(self, table: Any, name: str, keys: Mapping[str, tuple[_Check, str]]) -> None:
        where = f"{self.prefix}{name}" if name else self.prefix.rstrip(".")
        if not isinstance(table, dict):
            raise ConfigurationError(f"{self.path}: {where or name} must be a table")
        for key, value in table.items():
            dotted = f"{self.prefix}{name + '.' if name else ''}{key}"
            if key in _TABLES and not name:
                continue
            if key not in keys:
                known = ", ".join(sorted([*keys, *([] if name else _TABLES)]))
                raise ConfigurationError(
                    f"{self.path}: unknown key {dotted!r} (known keys: {known})"
                )
            check, expected = keys[key]
            if not check(value):
                raise ConfigurationError(f"{self.path}: {dotted} must be {expected}, got {value!r}")

    def project(self, data: Any) -> ProjectConfig:
        self._check(data, "", _TOP)
        for name, keys in _TABLES.items():
            self._check(data.get(name, {}), name, keys)
        root = self.path.parent.resolve()
        url = data.get("database_url")
        if (
            url is not None
            and url.startswith("sqlite:///")
            and not url.startswith(("sqlite:////", "sqlite:///:memory:"))
        ):
            url = "sqlite:///" + str(root / url.removeprefix("sqlite:///"))
        if "app" in data and "paths" in data:
            raise ConfigurationError(
                f"{self.path}: give either {self.prefix}app or {self.prefix}paths, not both"
            )
        worker = data.get("worker", {})
        return ProjectConfig(
            path=self.path,
            root=root,
            database_url=url,
            schema=data.get("schema"),
            app=data.get("app"),
            paths=tuple(data.get("paths", ())),
            ignore=tuple(data.get("ignore", ())),
            worker=WorkerConfig(
                concurrency=worker.get("concurrency"),
                workflows=tuple(worker.get("workflows", ())),
                lease=worker.get("lease"),
                poll_interval=worker.get("poll_interval"),
            ),
            server=ServerConfig(
                host=data.get("server", {}).get("host"),
                port=data.get("server", {}).get("port"),
                allowed_hosts=tuple(data.get("server", {}).get("allowed_hosts", ())),
            ),
            telemetry=TelemetryConfig(**data.get("telemetry", {})),
        )
