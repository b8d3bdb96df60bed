"""perdure: durable workflows for Python, journaled in PostgreSQL or SQLite."""

from logging import NullHandler as _NullHandler
from logging import getLogger as _getLogger

from ._version import __version__
from .app import App
from .context import Context, StepApi
from .durations import parse_duration
from .errors import (
    BackendError,
    ChildTimeout,
    ConfigurationError,
    DeadlineExceeded,
    MissingDependencyError,
    NonDeterminismError,
    NotFoundError,
    PerdureError,
    PoisonRun,
    ReadOnlyDatabase,
    RunNotFound,
    RunStateError,
    SchemaVersionError,
    SerializationError,
    StepFailed,
    StepLimitExceeded,
    StepTimeout,
    TimeoutError,
    ValidationError,
    WorkflowCancelled,
    WorkflowFailed,
)
from .flows.dsl import Flow, TaskContext
from .handle import RunHandle
from .records import (
    Event,
    FlowTask,
    Page,
    Published,
    Received,
    Run,
    Schedule,
    Step,
    WorkerInfo,
    WorkflowSummary,
)
from .retry import NonRetriableError, RetryAfter, RetryPolicy
from .step_info import StepInfo, current_step
from .worker import Worker

__all__ = [
    "App",
    "BackendError",
    "ChildTimeout",
    "ConfigurationError",
    "Context",
    "DeadlineExceeded",
    "Event",
    "Flow",
    "FlowTask",
    "MissingDependencyError",
    "NonDeterminismError",
    "NonRetriableError",
    "NotFoundError",
    "Page",
    "PerdureError",
    "PoisonRun",
    "Published",
    "ReadOnlyDatabase",
    "Received",
    "RetryAfter",
    "RetryPolicy",
    "Run",
    "RunHandle",
    "RunNotFound",
    "RunStateError",
    "Schedule",
    "SchemaVersionError",
    "SerializationError",
    "Step",
    "StepApi",
    "StepFailed",
    "StepInfo",
    "StepLimitExceeded",
    "StepTimeout",
    "TaskContext",
    "TimeoutError",
    "ValidationError",
    "Worker",
    "WorkerInfo",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowSummary",
    "__version__",
    "current_step",
    "parse_duration",
]

# A library writes nothing to stderr unless its user configured logging: without this
# handler, Python's last-resort handler would print every WARNING of ours. A handler
# the user adds (logging.basicConfig, a framework) still gets every record.
_getLogger(__name__).addHandler(_NullHandler())
