"""The public names are pinned: adding or removing one is a deliberate change."""

import perdure

EXPECTED = {
    "App", "BackendError", "ChildTimeout", "ConfigurationError", "Context", "DeadlineExceeded",
    "Event", "LeaseLost", "MissingDependencyError", "NonDeterminismError", "NonRetriableError",
    "NotFoundError", "Page", "Published", "RetryAfter", "RetryPolicy", "Run", "RunHandle",
    "RunNotFound", "SchemaVersionError", "SerializationError", "Step", "StepApi", "StepFailed",
    "PerdureError", "PoisonRun", "StepLimitExceeded", "StepTimeout", "TimeoutError",
    "ValidationError", "WorkerInfo", "Worker", "WorkflowCancelled", "WorkflowFailed",
    "WorkflowSummary",
    "StepInfo", "__version__", "current_step", "parse_duration",
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
