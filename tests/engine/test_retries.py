"""Retries and limits (DESIGN §4): the step-attempt cap counts retries, a workflow
retry reruns the step whose failure ended the attempt, NonRetriableError ends it."""

from __future__ import annotations

import pytest

from perdure import (
    App,
    Context,
    NonRetriableError,
    RetryPolicy,
    StepLimitExceeded,
    WorkflowFailed,
)


def test_the_step_attempt_cap_counts_the_retries_of_one_step(database) -> None:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, sweep_interval=0, max_step_attempts=5)
    calls: list[int] = []

    @app.workflow
    async def stubborn(ctx: Context, _: object) -> None:
        def fail() -> None:
            calls.append(1)
            raise RuntimeError("still down")

        forever = RetryPolicy(max_attempts=0, backoff="fixed", initial="10ms", jitter=0)
        await ctx.step.run("call", fail, retry=forever)

    try:
        with app.worker(), pytest.raises(WorkflowFailed) as info:
            app.run(stubborn, timeout=60)
        assert info.value.error["type"] == StepLimitExceeded.__name__
        assert len(calls) == 5
    finally:
        app.close()


def test_a_workflow_retry_reruns_the_failed_step_with_a_fresh_budget(app: App) -> None:
    calls: list[str] = []

    @app.workflow(retry=RetryPolicy(max_attempts=2, initial="10ms", jitter=0))
    async def flaky(ctx: Context, _: object) -> str:
        def one() -> str:
            calls.append("first")
            return "one"

        first = await ctx.step.run("first", one)

        def second() -> str:
            calls.append("second")
            if calls.count("second") <= 2:  # fails both attempts of the first run attempt
                raise RuntimeError("not yet")
            return "two"

        fast = RetryPolicy(max_attempts=2, initial="10ms", jitter=0)
        return f"{first} {await ctx.step.run('second', second, retry=fast)}"

    with app.worker():
        handle = app.start(flaky)
        assert handle.result(timeout=60) == "one two"
    assert calls == ["first", "second", "second", "second"]  # "first" stays journaled
    assert handle.get().attempt == 2


def test_non_retriable_error_gets_no_workflow_retry(app: App) -> None:
    calls: list[int] = []

    @app.workflow(retry=RetryPolicy(max_attempts=3, initial="10ms", jitter=0))
    async def refuses(ctx: Context, _: object) -> None:
        calls.append(1)
        raise NonRetriableError("bad request")

    with app.worker(), pytest.raises(WorkflowFailed) as info:
        app.run(refuses, timeout=60)
    assert info.value.error["type"] == "NonRetriableError"
    assert calls == [1]
    assert app.get_run(app.list_runs().items[0].id).attempt == 1


def test_a_step_raising_non_retriable_error_gets_no_workflow_retry_either(app: App) -> None:
    calls: list[int] = []

    @app.workflow(retry=RetryPolicy(max_attempts=3, initial="10ms", jitter=0))
    async def refuses(ctx: Context, _: object) -> None:
        def call() -> None:
            calls.append(1)
            raise NonRetriableError("card declined")

        await ctx.step.run("charge", call)

    with app.worker(), pytest.raises(WorkflowFailed) as info:
        app.run(refuses, timeout=60)
    assert info.value.error["type"] == "StepFailed"
    assert calls == [1]
