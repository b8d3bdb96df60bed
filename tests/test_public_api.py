"""The public names are pinned: adding or removing one is a deliberate change."""

import perdure

EXPECTED = {
    "App", "BackendError", "ChildTimeout", "ConfigurationError", "Context", "DeadlineExceeded",
    "Event", "MissingDependencyError", "NonDeterminismError", "NonRetriableError",
    "NotFoundError", "Page", "Published", "Received", "RetryAfter", "RetryPolicy", "Run",
    "ReadOnlyDatabase", "RunHandle", "RunNotFound", "RunStateError", "Schedule",
    "SchemaVersionError",
    "SerializationError",
    "Step", "StepApi", "StepFailed",
    "PerdureError", "PoisonRun", "StepLimitExceeded", "StepTimeout", "TimeoutError",
    "ValidationError", "WorkerInfo", "Worker", "WorkflowCancelled", "WorkflowFailed",
    "WorkflowSummary",
    "StepInfo", "__version__", "current_step", "parse_duration",
    "Flow", "FlowTask", "TaskContext",
}  # fmt: skip


def test_exported_names() -> None:
    assert set(perdure.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(perdure, name), name


def test_errors_share_one_base_and_builtin_mixins() -> None:
    for name in EXPECTED:
        obj = getattr(perdure, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, perdure.PerdureError), name
    assert issubclass(perdure.ValidationError, ValueError)
    assert issubclass(perdure.SerializationError, ValueError)
    assert issubclass(perdure.RunNotFound, LookupError)
    assert issubclass(perdure.TimeoutError, TimeoutError)


def test_every_exported_error_is_raised_or_stored_somewhere() -> None:
    """An exported error class that nothing raises or records is dead weight."""
    from pathlib import Path

    source = "\n".join(
        p.read_text() for p in Path(perdure.__file__).parent.rglob("*.py") if p.name != "errors.py"
    )
    bases = {"PerdureError", "NotFoundError", "ValidationError", "BackendError"}
    for name in EXPECTED:
        obj = getattr(perdure, name)
        if isinstance(obj, type) and issubclass(obj, BaseException) and name not in bases:
            assert f"{name}(" in source, f"{name} is exported but never raised or stored"
