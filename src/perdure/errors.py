"""The exception hierarchy: every error perdure raises derives from PerdureError.

```
PerdureError
├── ConfigurationError                   bad URL, settings or registration
│   ├── MissingDependencyError (+ImportError)  names the extra to install
│   └── ReadOnlyDatabase (+BackendError) a write on a read-only file or a read-only app
├── ValidationError (+ValueError)        bad input at any edge; nothing was stored
│   └── SerializationError               a value is not JSON (names the workflow or step)
├── NotFoundError (+LookupError)
│   └── RunNotFound
├── BackendError                         storage failure; the driver error is __cause__
│   └── SchemaVersionError               database schema newer than this code
├── StepFailed                           raised in the body when a step failed for good
├── WorkflowFailed                       from result()/run(); .error holds the cause
├── WorkflowCancelled
├── DeadlineExceeded                     the run's deadline passed
├── StepLimitExceeded                    the run made more step attempts than allowed
├── NonDeterminismError                  the body changed the order or kind of its steps
├── PoisonRun                            the run's stored data cannot be handled
├── StepTimeout                          a step attempt outlived its timeout
├── ChildTimeout                         run_workflow's wait outlived its timeout
└── TimeoutError (+builtins.TimeoutError) waiting for a result timed out
```

The engine records the errors from DeadlineExceeded down in a run's or step's
``error`` under their class names (``WorkflowFailed.error["type"]``), so code can
match on ``error["type"] == perdure.StepLimitExceeded.__name__``.

`NonRetriableError` and `RetryAfter` are raised by user code to steer retries;
they live in `perdure.retry` and also derive from PerdureError.
"""

from __future__ import annotations

import builtins
from typing import Any

__all__ = [
    "BackendError",
    "ChildTimeout",
    "ConfigurationError",
    "DeadlineExceeded",
    "MissingDependencyError",
    "NonDeterminismError",
    "NotFoundError",
    "PerdureError",
    "PoisonRun",
    "ReadOnlyDatabase",
    "RunNotFound",
    "SchemaVersionError",
    "SerializationError",
    "StepFailed",
    "StepLimitExceeded",
    "StepTimeout",
    "TimeoutError",
    "ValidationError",
    "WorkflowCancelled",
    "WorkflowFailed",
]


class PerdureError(Exception):
    """Base class of every perdure error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())


class ConfigurationError(PerdureError):
    """perdure is configured wrongly (database URL, settings, registration)."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is not installed; install it with: pip install 'perdure[{extra}]'"
        )
        self.package = package
        self.extra = extra


class RunStateError(PerdureError, ValueError):
    """The run's status does not allow this (retrying a run that is still live)."""


class ValidationError(PerdureError, ValueError):
    """A value given to perdure is invalid; nothing was stored."""


class SerializationError(ValidationError):
    """A value could not be encoded as JSON."""


class NotFoundError(PerdureError, LookupError):
    """Something that was asked for does not exist."""


class RunNotFound(NotFoundError):
    """No run has this id."""

    def __init__(self, run_id: object) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class BackendError(PerdureError):
    """The database failed; the driver's error is the __cause__."""


class SchemaVersionError(BackendError):
    """The database schema does not match this version of perdure."""


class ReadOnlyDatabase(ConfigurationError, BackendError):
    """Something tried to write to a database that is read-only: an SQLite file this
    process cannot write (file mode, directory, read-only mount), or an app opened
    with ``read_only=True``. Nothing was stored. Reads work on such a database when it
    is opened read-only (``App(read_only=True)``, ``PERDURE_READ_ONLY=1``).

    A configuration error first: a worker starting on such a database stops at once
    instead of waiting for it. It is also a `BackendError`, so a file that turns
    read-only under a running worker is handled like any storage failure.

    Attributes:
        target: the SQLite file ("" on PostgreSQL).
        opened_read_only: True when the refusal is read-only mode's, False when the
            file itself cannot be written.
    """

    def __init__(self, message: str, target: str = "", *, opened_read_only: bool = False) -> None:
        super().__init__(message)
        self.target = target
        self.opened_read_only = opened_read_only


class StepFailed(PerdureError):
    """A step failed for good (after its retries); raised inside the workflow body.

    Attributes:
        step: the step's journal key (``name`` or ``name:N``).
        error: the serialized cause: ``{"type", "message", ...}``.
        attempts: how many attempts were made.
    """

    def __init__(self, step: str, error: dict[str, Any], attempts: int = 1) -> None:
        kind = error.get("type", "Error")
        super().__init__(
            f"step {step!r} failed after {attempts} attempt(s): {kind}: {error.get('message', '')}"
        )
        self.step = step
        self.error = error
        self.attempts = attempts


class WorkflowFailed(PerdureError):
    """The run ended ``failed``; ``.error`` holds the serialized cause."""

    def __init__(self, run_id: str, error: dict[str, Any] | None) -> None:
        error = error or {}
        super().__init__(
            f"run {run_id} failed: {error.get('type', 'Error')}: {error.get('message', '')}"
        )
        self.run_id = run_id
        self.error = error


class WorkflowCancelled(PerdureError):
    """The run was cancelled."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} was cancelled")
        self.run_id = run_id


class DeadlineExceeded(PerdureError):
    """The run's deadline passed before it ended (also while it was parked)."""


class StepLimitExceeded(PerdureError):
    """The run made more step attempts, retries included, than ``max_step_attempts``."""


class NonDeterminismError(PerdureError):
    """On replay the body asked for a step of another kind than the journal holds under
    that key: the code changed under a running version (start a new version instead)."""


class PoisonRun(PerdureError):
    """The run's stored data (input, journal, a payload) cannot be decoded or handled,
    e.g. written around the engine's checks; the run fails, the worker goes on."""


class StepTimeout(PerdureError):
    """A step attempt took longer than its ``timeout`` (retried like any failure)."""


class ChildTimeout(PerdureError):
    """``run_workflow``'s wait took longer than its ``timeout``; the child goes on."""


class TimeoutError(PerdureError, builtins.TimeoutError):
    """Waiting for a result took longer than the timeout; the run goes on."""
