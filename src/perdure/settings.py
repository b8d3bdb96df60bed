"""Settings: explicit arguments, then PERDURE_* environment variables, then defaults.

This is the only module that reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigurationError
from .serialization import MAX_PAYLOAD_BYTES
from .validation import check_int, is_number

__all__ = ["Settings"]

DEFAULT_DATABASE_URL = "sqlite:///perdure.db"


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, got {value}")
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    raise ConfigurationError(f"{name}={env[name]!r} is not a boolean: use 1 or 0")


@dataclass(frozen=True, slots=True)
class Settings:
    """Resolved configuration of an `App`.

    Attributes:
        database_url: ``PERDURE_DATABASE_URL``, default ``sqlite:///perdure.db``.
        schema: Postgres schema, ``PERDURE_SCHEMA``, default ``perdure``.
        max_retention_days: cap on any run's retention, ``PERDURE_MAX_RETENTION_DAYS``,
            default 365.
        max_step_attempts: step attempts a run may make, ``PERDURE_MAX_STEP_ATTEMPTS``,
            default 1000.
        max_payload_bytes: largest JSON value stored, ``PERDURE_MAX_PAYLOAD_BYTES``,
            default and maximum 10 MiB (the limit of every entry, SQL producers included).
        max_claims_without_progress: a run claimed this many times in a row without
            committing anything (its worker died each time) fails as ``PoisonRun``;
            ``PERDURE_MAX_RECOVERIES``, default 10; 0 disables.
        sweep_interval: seconds between retention sweeps in workers and the server,
            ``PERDURE_SWEEP_INTERVAL``, default 300; 0 disables.
        read_only: open the database read-only, ``PERDURE_READ_ONLY`` (1 or 0), default
            False: no migration (the schema version is checked instead), no workflow
            registration, no worker, and every write raises `ReadOnlyDatabase`. An
            SQLite file is opened with SQLite's read-only mode, so it may be a file
            this process cannot write (see docs/storage.md).
    """

    database_url: str = DEFAULT_DATABASE_URL
    schema: str = "perdure"
    max_retention_days: int = 365
    max_step_attempts: int = 1000
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    max_claims_without_progress: int = 10
    sweep_interval: float = 300.0
    read_only: bool = False

    def __post_init__(self) -> None:
        # Explicit arguments (App(max_step_attempts=...)) get the same checks as the
        # environment variables.
        for name in ("database_url", "schema"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"{name} must be a non-empty string, got {value!r}")
        minimums = {
            "max_retention_days": 1,
            "max_step_attempts": 1,
            "max_payload_bytes": 1024,
            "max_claims_without_progress": 0,
        }
        for name, minimum in minimums.items():
            check_int(getattr(self, name), name, minimum=minimum, error=ConfigurationError)
        if self.max_payload_bytes > MAX_PAYLOAD_BYTES:
            raise ConfigurationError(
                f"max_payload_bytes must be at most {MAX_PAYLOAD_BYTES} (10 MiB), "
                f"got {self.max_payload_bytes}"
            )
        interval = self.sweep_interval
        if not is_number(interval) or interval < 0:
            raise ConfigurationError(f"sweep_interval must be seconds >= 0, got {interval!r}")
        if not isinstance(self.read_only, bool):
            raise ConfigurationError(f"read_only must be True or False, got {self.read_only!r}")

    @classmethod
    def load(
        cls,
        database_url: str | None = None,
        *,
        schema: str | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: object,
    ) -> Settings:
        """Build settings from arguments, the environment and defaults."""
        env = os.environ if env is None else env
        url = database_url or env.get("PERDURE_DATABASE_URL") or DEFAULT_DATABASE_URL
        values: dict[str, object] = {
            "database_url": url,
            "schema": schema or env.get("PERDURE_SCHEMA") or "perdure",
            "max_retention_days": _int(env, "PERDURE_MAX_RETENTION_DAYS", 365, minimum=1),
            "max_step_attempts": _int(env, "PERDURE_MAX_STEP_ATTEMPTS", 1000, minimum=1),
            "max_payload_bytes": _int(
                env, "PERDURE_MAX_PAYLOAD_BYTES", MAX_PAYLOAD_BYTES, minimum=1024
            ),
            "max_claims_without_progress": _int(env, "PERDURE_MAX_RECOVERIES", 10),
            "sweep_interval": float(_int(env, "PERDURE_SWEEP_INTERVAL", 300)),
            "read_only": _bool(env, "PERDURE_READ_ONLY"),
        }
        for key, value in overrides.items():
            if key not in cls.__dataclass_fields__:
                raise ConfigurationError(f"unknown setting {key!r}")
            if value is not None:
                values[key] = value
        return cls(**values)  # type: ignore[arg-type]
