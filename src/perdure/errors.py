"""The exception hierarchy: every error perdure raises derives from PerdureError.

```
PerdureError
├── ConfigurationError                   bad URL, settings or registration
│   └── MissingDependencyError (+ImportError)  names the extra to install
├── ValidationError (+ValueError)        bad input at any edge; nothing was stored
│   ├── SerializationError               a value is not JSON (names the workflow or step)
│   └── IdempotencyConflict              same idempotency key, different input
├── NotFoundError (+LookupError)
│   ├── RunNotFound
│   └── WorkflowNotRegistered
├── BackendError                         storage failure; the driver error is __cause__
│   ├── SchemaVersionError               database schema newer than this code
│   └── LeaseLost                        a fenced write was rejected (zombie worker)
├── StepFailed                           raised in the body when a step failed for good
├── WorkflowFailed                       from result()/run(); .error holds the cause
├── WorkflowCancelled
├── DeadlineExceeded                     the run's deadline passed
└── TimeoutError (+builtins.TimeoutError) waiting for a result timed out
```

`NonRetriableError` and `RetryAfter` are raised by user code to steer retries;
they live in `perdure.retry` and also derive from PerdureError.
"""

from __future__ import annotations

import builtins
from typing import Any

__all__ = [
    "BackendError",
    "ConfigurationError",
    "DeadlineExceeded",
    "IdempotencyConflict",
    "LeaseLost",
    "MissingDependencyError",
    "NotFoundError",
    "PerdureError",
    "RunNotFound",
    "SchemaVersionError",
    "SerializationError",
    "StepFailed",
    "TimeoutError",
    "ValidationError",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowNotRegistered",
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


class ValidationError(PerdureError, ValueError):
    """A value given to perdure is invalid; nothing was stored."""


class SerializationError(ValidationError):
    """A value could not be encoded as JSON."""


class IdempotencyConflict(ValidationError):
    """A run with this idempotency key exists with a different input."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class NotFoundError(PerdureError, LookupError):
    """Something that was asked for does not exist."""


class RunNotFound(NotFoundError):
    """No run has this id."""

    def __init__(self, run_id: object) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class WorkflowNotRegistered(NotFoundError):
    """No workflow of this name (or version) is registered."""


class BackendError(PerdureError):
    """The database failed; the driver's error is the __cause__."""


class SchemaVersionError(BackendError):
    """The database schema does not match this version of perdure."""


class LeaseLost(BackendError):
    """The worker no longer holds the run's lease; the write was rejected and nothing stored."""


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
    """The run's deadline passed before it ended."""


class TimeoutError(PerdureError, builtins.TimeoutError):
    """Waiting for a result took longer than the timeout; the run goes on."""
