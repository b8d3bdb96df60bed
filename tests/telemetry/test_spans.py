"""Spans through the OpenTelemetry SDK's in-memory exporter: one ``workflow.run`` span
per execution pass and one ``workflow.step`` span per attempt, with seed 000's
attributes, all children of the span that was active around ``app.start`` (the trace
context travels with the run through the database); a waiting run leaves a gap."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from perdure import App, Context, RetryPolicy
from perdure.telemetry.tracing import current_traceparent, parent_context, refresh
from tests.engine.helpers import wait_for

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The global tracer provider (set once per process) exporting to memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    refresh()  # perdure looks the provider up at most once a second
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def app(database: Any) -> Iterator[App]:
    app = App(database.url, schema=database.schema)
    yield app
    app.close()


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return sorted(
        (s for s in exporter.get_finished_spans() if s.name == name),
        key=lambda s: s.start_time or 0,
    )


def test_run_and_step_spans_join_the_trace_of_the_code_that_started_the_run(
    app: App, spans: InMemorySpanExporter
) -> None:
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        inner = trace.get_current_span()  # the step's span is current inside the step
        assert inner.is_recording() and inner.name == "workflow.step"  # type: ignore[attr-defined]
        if calls["n"] == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    @app.workflow(version=3)
    async def traced(ctx: Context, x: int) -> str:
        await ctx.step.run("first", lambda: x + 1)
        await ctx.step.sleep("nap", "200ms")
        return await ctx.step.run(
            "second", flaky, retry=RetryPolicy(max_attempts=2, backoff="fixed", initial="10ms")
        )

    tracer = trace.get_tracer("tests")
    with app.worker(concurrency=2):
        with tracer.start_as_current_span("caller") as caller:
            handle = app.start(traced, 1)  # sync start: through the portal thread
        assert handle.result(timeout=30) == "ok"
        wait_for(lambda: any(_attrs(s).get("status") == "completed"
                             for s in _named(spans, "workflow.run")), 10)  # fmt: skip

    parent = caller.get_span_context()
    runs = _named(spans, "workflow.run")
    # Passes: steps and sleep (parks), the retry's backoff (parks), the end.
    assert [_attrs(s)["status"] for s in runs] == ["waiting", "waiting", "completed"]
    for run_span in runs:
        assert run_span.context.trace_id == parent.trace_id
        assert run_span.parent is not None and run_span.parent.span_id == parent.span_id
        assert dict(run_span.attributes or {}) == {
            "workflow.name": "traced",
            "workflow.version": 3,
            "run_id": handle.id,
            "status": _attrs(run_span)["status"],
        }
    # Each pass's span ended before the next began: the sleep is a gap, not a span.
    for before, after in itertools.pairwise(runs):
        assert before.end_time is not None and after.start_time is not None
        assert before.end_time <= after.start_time

    steps = [s for s in _named(spans, "workflow.step") if _attrs(s)["step.kind"] == "run"]
    assert [(_attrs(s)["step.name"], _attrs(s)["step.attempt"]) for s in steps] == [
        ("first", 1),
        ("second", 1),
        ("second", 2),
    ]
    by_id = {s.context.span_id: s for s in runs}
    for step in steps:
        assert step.parent is not None and step.parent.span_id in by_id
        assert step.context.trace_id == parent.trace_id
        assert _attrs(step)["workflow.name"] == "traced"
        assert _attrs(step)["run_id"] == handle.id
        assert _attrs(step)["step.kind"] == "run"
    failed = steps[1]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    assert by_id[steps[0].parent.span_id] is runs[0]  # type: ignore[union-attr]
    assert by_id[steps[2].parent.span_id] is runs[2]  # type: ignore[union-attr]
    # The sleep is one span from the park to the wake, made by the pass that wakes.
    (nap,) = [s for s in _named(spans, "workflow.step") if _attrs(s)["step.kind"] == "sleep"]
    assert _attrs(nap) == {
        "workflow.name": "traced",
        "run_id": handle.id,
        "step.name": "nap",
        "step.kind": "sleep",
        "step.attempt": 1,
    }
    assert nap.parent is not None and by_id[nap.parent.span_id] is runs[1]
    assert nap.start_time is not None and nap.end_time is not None
    assert nap.end_time - nap.start_time >= 190_000_000  # the 200ms it slept


async def test_a_signal_is_traced_in_the_senders_trace_and_a_failed_run_is_an_error(
    app: App, spans: InMemorySpanExporter
) -> None:
    @app.workflow
    async def gate(ctx: Context, _: None) -> Any:
        payload = await ctx.step.wait_for_event("approve", event="approved")
        raise ValueError(f"refused {payload}")

    tracer = trace.get_tracer("tests")
    async with app:
        worker = app.worker()
        import asyncio

        task = asyncio.create_task(worker.serve())
        try:
            handle = await app.start_async(gate)
            await handle_status(app, handle.id, "waiting")
            with tracer.start_as_current_span("sender") as sender:
                assert await app.signal_async(handle.id, "approved", {"n": 1})
            await handle_status(app, handle.id, "failed")
        finally:
            worker.stop()
            await task

    (signal,) = _named(spans, "workflow.signal")
    assert signal.parent is not None
    assert signal.parent.span_id == sender.get_span_context().span_id
    assert dict(signal.attributes or {}) == {
        "workflow.name": "gate",
        "run_id": handle.id,
        "event": "approved",
    }
    runs = _named(spans, "workflow.run")
    assert [_attrs(s)["status"] for s in runs] == ["waiting", "failed"]
    assert runs[-1].status.status_code == trace.StatusCode.ERROR
    # Started outside any span: no context is stored, each pass is a root span.
    assert all(s.parent is None for s in runs)


async def test_a_wait_is_one_span_from_the_park_to_the_event(
    app: App, spans: InMemorySpanExporter
) -> None:
    @app.workflow
    async def gate(ctx: Context, _: None) -> Any:
        payload = await ctx.step.wait_for_event("approve", event="approved")
        await ctx.step.sleep("rest", "50ms")
        await ctx.step.run("after", lambda: None)
        return payload

    async with app:
        worker = app.worker()
        import asyncio

        task = asyncio.create_task(worker.serve())
        try:
            handle = await app.start_async(gate)
            await handle_status(app, handle.id, "waiting")
            parked = await app.get_run_async(handle.id)
            assert await app.signal_async(handle.id, "approved", {"n": 1})
            assert await handle.result_async(timeout=30) == {"n": 1}
        finally:
            worker.stop()
            await task

    runs = _named(spans, "workflow.run")
    assert [_attrs(s)["status"] for s in runs] == ["waiting", "waiting", "completed"]
    (wait,) = [s for s in _named(spans, "workflow.step") if _attrs(s)["step.kind"] == "wait"]
    assert _attrs(wait) == {
        "workflow.name": "gate",
        "run_id": handle.id,
        "step.name": "approve",
        "step.kind": "wait",
        "step.attempt": 1,
    }
    assert wait.parent is not None and wait.parent.span_id == runs[1].context.span_id
    assert wait.start_time is not None and wait.end_time is not None
    assert parked.started_at is not None
    assert wait.start_time >= int(parked.started_at.timestamp() * 1e9) - 1_000_000
    assert wait.end_time >= wait.start_time
    # Only the pass that woke makes it: the run's later passes replay it without one.
    (rest,) = [s for s in _named(spans, "workflow.step") if _attrs(s)["step.kind"] == "sleep"]
    assert rest.parent is not None and rest.parent.span_id == runs[2].context.span_id


async def handle_status(app: App, run_id: str, status: str) -> None:
    from tests.engine.helpers import wait_for_async

    async def reached() -> bool:
        return (await app.get_run_async(run_id)).status == status

    await wait_for_async(reached, 30)


def test_traceparent_round_trips_and_malformed_ones_are_ignored(
    spans: InMemorySpanExporter,
) -> None:
    assert current_traceparent() is None
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("outer") as outer:
        value = current_traceparent()
    ctx = outer.get_span_context()
    assert value == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    restored = trace.get_current_span(parent_context(value)).get_span_context()
    assert (restored.trace_id, restored.span_id, restored.is_remote) == (
        ctx.trace_id,
        ctx.span_id,
        True,
    )
    for bad in (
        None,
        "",
        "01-" + value[3:],
        value.upper(),
        value + "-x",
        "00-" + "0" * 32 + value[35:],
    ):
        assert parent_context(bad) is None


def test_a_rest_start_with_a_traceparent_header_joins_that_trace_across_processes(
    database: Any, app: App, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    from tests.server.harness import environment, server

    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        return await ctx.step.run("greet", lambda: f"hi {name}")

    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    header = {"traceparent": f"00-{trace_id}-{span_id}-01"}
    with server(environment(database, tmp_path), tmp_path) as http:  # perdure serve
        started = http.post("/v1/workflows/greet/runs", {"input": "ada"}, headers=header)
        plain = http.post("/v1/workflows/greet/runs", {"input": "bob"})
    with app.worker():  # this process: the trace context came through the database
        assert app.result(started.body["runId"], timeout=30) == "hi ada"
        assert app.result(plain.body["runId"], timeout=30) == "hi bob"
        wait_for(lambda: len(_named(spans, "workflow.run")) == 2, 10)
    by_run = {_attrs(s)["run_id"]: s for s in _named(spans, "workflow.run")}
    joined = by_run[started.body["runId"]]
    assert f"{joined.context.trace_id:032x}" == trace_id
    assert joined.parent is not None and f"{joined.parent.span_id:016x}" == span_id
    assert joined.parent.is_remote
    assert by_run[plain.body["runId"]].parent is None


def test_a_child_runs_spans_join_the_trace_of_the_pass_that_started_it(
    app: App, spans: InMemorySpanExporter
) -> None:
    @app.workflow
    async def leaf(ctx: Context, n: int) -> int:
        return await ctx.step.run("square", lambda: n * n)

    @app.workflow
    async def root(ctx: Context, n: int) -> int:
        return await ctx.step.run_workflow("child", leaf, n) + 1

    tracer = trace.get_tracer("tests")
    with app.worker(concurrency=2):
        with tracer.start_as_current_span("caller") as caller:
            handle = app.start(root, 3)
        assert handle.result(timeout=30) == 10
        wait_for(lambda: len(_named(spans, "workflow.run")) == 3, 10)
    runs = _named(spans, "workflow.run")
    trace_id = caller.get_span_context().trace_id
    assert {s.context.trace_id for s in runs} == {trace_id}
    roots = [s for s in runs if _attrs(s)["workflow.name"] == "root"]
    (child,) = [s for s in runs if _attrs(s)["workflow.name"] == "leaf"]
    assert [_attrs(s)["status"] for s in roots] == ["waiting", "completed"]
    assert child.parent is not None and child.parent.span_id == roots[0].context.span_id
