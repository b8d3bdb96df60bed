"""Redaction of records: the keys configured are masked wherever a record carries
values, nested records included; the record given is left as it was."""

from __future__ import annotations

from perdure.records import FlowTask, Step
from perdure.redaction import Redaction


def _task(output: object) -> FlowTask:
    return FlowTask(0, "completed", 1, output, None, "t1", None, None)


def test_a_flow_steps_tasks_are_masked_too() -> None:
    step = Step(
        name="charge",
        kind="flow-task",
        status="completed",
        output=[{"card": "4111"}],
        error=None,
        attempts=1,
        started_at=None,
        completed_at=None,
        tasks=(_task({"card": "4111", "brand": "visa"}),),
    )
    shown = Redaction(["card"], register=False).record(step)
    assert shown.output == [{"card": "***"}]
    assert shown.tasks[0].output == {"card": "***", "brand": "visa"}
    assert step.tasks[0].output == {"card": "4111", "brand": "visa"}  # untouched
