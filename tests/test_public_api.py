"""The public names are pinned: adding or removing one is a deliberate change."""

import stepwise

EXPECTED = {
    "App", "BackendError", "ConfigurationError", "Context", "DeadlineExceeded", "Event",
    "IdempotencyConflict", "LeaseLost", "MissingDependencyError", "NonRetriableError",
    "NotFoundError", "Page", "Published", "RetryAfter", "RetryPolicy", "Run", "RunHandle",
    "RunNotFound", "SchemaVersionError", "SerializationError", "Step", "StepApi", "StepFailed",
    "StepwiseError", "TimeoutError", "ValidationError", "WorkerInfo", "Worker",
    "WorkflowCancelled", "WorkflowFailed", "WorkflowNotRegistered", "WorkflowSummary",
    "__version__", "parse_duration",
}  # fmt: skip


def test_exported_names() -> None:
    assert set(stepwise.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(stepwise, name), name


def test_errors_share_one_base_and_builtin_mixins() -> None:
    for name in EXPECTED:
        obj = getattr(stepwise, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, stepwise.StepwiseError), name
    assert issubclass(stepwise.ValidationError, ValueError)
    assert issubclass(stepwise.SerializationError, ValueError)
    assert issubclass(stepwise.RunNotFound, LookupError)
    assert issubclass(stepwise.TimeoutError, TimeoutError)
