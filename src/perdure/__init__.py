"""perdure: durable workflows for Python, journaled in PostgreSQL or SQLite."""

from .app import App
from .context import Context, StepApi
from .durations import parse_duration
from .errors import (
    BackendError,
    ConfigurationError,
    DeadlineExceeded,
    IdempotencyConflict,
    LeaseLost,
    MissingDependencyError,
    NotFoundError,
    PerdureError,
    RunNotFound,
    SchemaVersionError,
    SerializationError,
    StepFailed,
    TimeoutError,
    ValidationError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotRegistered,
)
from .handle import RunHandle
from .records import Event, Page, Published, Run, Step, WorkerInfo, WorkflowSummary
from .retry import NonRetriableError, RetryAfter, RetryPolicy
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "BackendError",
    "ConfigurationError",
    "Context",
    "DeadlineExceeded",
    "Event",
    "IdempotencyConflict",
    "LeaseLost",
    "MissingDependencyError",
    "NonRetriableError",
    "NotFoundError",
    "Page",
    "PerdureError",
    "Published",
    "RetryAfter",
    "RetryPolicy",
    "Run",
    "RunHandle",
    "RunNotFound",
    "SchemaVersionError",
    "SerializationError",
    "Step",
    "StepApi",
    "StepFailed",
    "TimeoutError",
    "ValidationError",
    "Worker",
    "WorkerInfo",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowNotRegistered",
    "WorkflowSummary",
    "__version__",
    "parse_duration",
]
