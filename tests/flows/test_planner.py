"""The pure planner: properties over random shapes, and the rules one by one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perdure.errors import ValidationError
from perdure.flows.definition import FlowShape, StepShape, check_shape, make_shape, make_step
from perdure.flows.planner import advance, rerun, retry_delay, simulate

from .strategies import shapes


def _handler(sizes: dict[str, Any], fail: set[tuple[str, int]], seen: list[Any]):  # type: ignore[no-untyped-def]
    """Task outputs: a list of ``sizes[step]`` strings, or an object when not an int."""

    def handle(step: str, index: int, value: Any) -> tuple[bool, Any]:
        seen.append((step, index, value))
        if (step, index) in fail:
            return False, None
        size = sizes.get(step, 2)
        if isinstance(size, int):
            return True, [f"{step}.{index}.{j}" for j in range(size)]
        return True, {"step": step, "index": index}

    return handle


@settings(max_examples=200, deadline=None)
@given(
    shape=shapes(bounded=True),
    run_input=st.one_of(st.lists(st.integers(), max_size=3), st.just({"a": 1})),
    sizes=st.dictionaries(
        st.sampled_from([f"s{i}" for i in range(12)]),
        st.one_of(st.integers(min_value=0, max_value=3), st.just("obj")),
    ),
)
def test_random_flows_keep_the_rules(
    shape: FlowShape, run_input: Any, sizes: dict[str, Any]
) -> None:
    seen: list[Any] = []
    outcome = simulate(shape, run_input, _handler(sizes, set(), seen))
    done_before: dict[str, int] = {}
    for position, (step_name, _index, value) in enumerate(seen):
        step = shape.step(step_name)
        for dep in step.depends_on:  # every dependency had completed before
            assert dep in outcome.outputs
            assert done_before.setdefault(dep, position) <= position
        if step.map_over is None:
            # the input holds the run and exactly the direct dependencies
            assert set(value) == {"run", *step.depends_on}
            assert value["run"] == run_input
            for dep in step.depends_on:
                assert value[dep] == outcome.outputs[dep]
    if outcome.status == "completed":
        assert outcome.output is not None
        assert set(outcome.output) == set(shape.leaves())
        assert set(outcome.outputs) == {s.name for s in shape.steps}
        for step in shape.steps:
            if step.map_over is not None:
                source = run_input if step.map_over == "run" else outcome.outputs[step.map_over]
                assert isinstance(source, list)
                assert len(source) <= shape.max_tasks_of(step)
                assert len(outcome.outputs[step.name]) == len(source)
                tasks = [i for s, i, _ in seen if s == step.name]
                assert tasks == list(range(len(source)))  # one task per element, in order
    else:
        failed = shape.step(outcome.failed_step or "")
        # only a map over a non-list, or over more elements than its max_tasks, fails here
        assert failed.map_over is not None
        source = run_input if failed.map_over == "run" else outcome.outputs[failed.map_over]
        assert not isinstance(source, list) or len(source) > shape.max_tasks_of(failed)
        assert all(s != failed.name for s, _, _ in seen)  # none of its tasks ran


@settings(max_examples=100, deadline=None)
@given(shape=shapes(), data=st.data())
def test_a_task_failing_for_good_fails_the_run_at_that_step(
    shape: FlowShape, data: st.DataObject
) -> None:
    fail = {(data.draw(st.sampled_from([s.name for s in shape.steps])), 0)}
    seen: list[Any] = []
    outcome = simulate(shape, [1, 2], _handler({}, fail, seen))
    ran_failed = any((s, i) in fail for s, i, _ in seen)
    assert (outcome.status == "failed") == ran_failed
    if ran_failed:
        assert (seen[-1][0], seen[-1][1]) in fail  # nothing runs after it


def test_the_seed_example_input_and_output() -> None:
    shape = FlowShape(
        "analyze_website",
        steps=(
            StepShape("website"),
            StepShape("sentiment", ("website",)),
            StepShape("summary", ("website",)),
            StepShape("saveToDb", ("sentiment", "summary")),
        ),
    )
    first = advance(shape, {"url": "u"}, {}, set())
    assert [(t.step, t.input) for t in first.tasks] == [("website", {"run": {"url": "u"}})]
    outputs: dict[str, Any] = {"website": {"content": "c"}}
    second = advance(shape, {"url": "u"}, outputs, {"website"})
    assert [t.step for t in second.tasks] == ["sentiment", "summary"]
    assert second.tasks[0].input == {"run": {"url": "u"}, "website": {"content": "c"}}
    outputs |= {"sentiment": 0.8, "summary": "s"}
    third = advance(shape, {"url": "u"}, outputs, {"website", "sentiment", "summary"})
    assert third.tasks[0].input == {"run": {"url": "u"}, "sentiment": 0.8, "summary": "s"}
    outputs["saveToDb"] = "ok"
    last = advance(shape, {"url": "u"}, outputs, {"website", "sentiment", "summary", "saveToDb"})
    assert last.output == {"saveToDb": "ok"}


def test_an_empty_map_completes_at_once_and_unlocks_its_dependents() -> None:
    shape = FlowShape(
        "f", steps=(StepShape("each", (), "run"), StepShape("again", ("each",), "each"))
    )
    result = advance(shape, [], {}, set())
    assert result.tasks == ()
    assert dict(result.completed) == {"each": [], "again": []}
    assert result.output == {"again": []}


def test_a_map_over_a_non_list_fails_naming_the_step() -> None:
    shape = FlowShape("f", steps=(StepShape("each", (), "run"),))
    result = advance(shape, {"not": "a list"}, {}, set())
    assert result.failure is not None
    assert result.failure[0] == "each"
    assert "'each'" in result.failure[1] and "an object" in result.failure[1]


def test_a_map_over_more_than_max_tasks_fails_naming_the_step_and_the_count() -> None:
    steps = (StepShape("first"), StepShape("fan", (), "run"), StepShape("last"))
    shape = FlowShape("f", steps=steps, max_tasks=3)
    at_bound = advance(shape, [1, 2, 3], {}, set())
    assert at_bound.failure is None
    assert [t.index for t in at_bound.tasks if t.step == "fan"] == [0, 1, 2]
    over = advance(shape, [1, 2, 3, 4], {}, set())
    assert over.failure == (
        "fan",
        "map step 'fan' would create 4 tasks, over its max_tasks of 3 (flow 'f': set a "
        "higher max_tasks on the step or the flow to allow more)",
    )
    assert [t.step for t in over.tasks] == ["first"]  # none of fan's, none after it
    # a step's own bound overrides the flow's, up or down
    raised = FlowShape("f", steps=(StepShape("fan", (), "run", max_tasks=5),), max_tasks=3)
    assert advance(raised, [1, 2, 3, 4, 5], {}, set()).failure is None
    lowered = FlowShape("f", steps=(StepShape("fan", (), "run", max_tasks=2),))
    failure = advance(lowered, [1, 2, 3], {}, set()).failure
    assert failure is not None and "3 tasks, over its max_tasks of 2" in failure[1]
    # the default bound: 10,000
    wide = FlowShape("f", steps=(StepShape("fan", (), "run"),))
    assert advance(wide, [0] * 10_000, {}, set()).failure is None
    failure = advance(wide, [0] * 10_001, {}, set()).failure
    assert failure is not None and "10001 tasks, over its max_tasks of 10000" in failure[1]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: make_shape("f", max_tasks=0), "max_tasks of flow 'f' must be at least 1"),
        (lambda: make_shape("f", max_tasks=True), "max_tasks of flow 'f' must be an integer"),
        (lambda: make_shape("f", max_tasks="10"), "max_tasks of flow 'f' must be an integer"),  # type: ignore[arg-type]
        (lambda: make_shape("f", max_tasks=2.5), "max_tasks of flow 'f' must be an integer"),  # type: ignore[arg-type]
        (lambda: make_shape("f", max_tasks=2**31), "out of range"),
        (lambda: make_step("m", map_over="run", max_tasks=0), "max_tasks of step 'm'"),
        (lambda: make_step("m", map_over="run", max_tasks=-5), "at least 1"),
        (lambda: make_step("a", max_tasks=5), "for map steps only"),
        (lambda: check_shape(FlowShape("f", max_tasks=0)), "max_tasks of flow"),
        (
            lambda: check_shape(FlowShape("f", steps=(StepShape("a", max_tasks=3),))),
            "for map steps only",
        ),
    ],
)
def test_a_bad_max_tasks_is_refused(make: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        make()


def test_max_tasks_is_part_of_the_shape() -> None:
    shape = make_shape("f", max_tasks=50).with_step(make_step("m", map_over="run", max_tasks=7))
    assert (shape.max_tasks, shape.steps[0].max_tasks) == (50, 7)
    assert FlowShape.from_dict(shape.to_dict()) == shape
    assert shape.to_dict() != make_shape("f").with_step(make_step("m", map_over="run")).to_dict()


def test_roots_only_and_several_roots() -> None:
    shape = FlowShape("f", steps=(StepShape("a"), StepShape("b"), StepShape("c", (), "run")))
    result = advance(shape, [7, 8], {}, set())
    assert [(t.step, t.index) for t in result.tasks] == [("a", 0), ("b", 0), ("c", 0), ("c", 1)]
    assert [t.input for t in result.tasks if t.step == "c"] == [7, 8]


def test_retry_delay_doubles() -> None:
    assert [retry_delay(5, a) for a in (1, 2, 3)] == [10, 20, 40]
    assert retry_delay(0, 4) == 0


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((StepShape("a"), StepShape("a")), "twice"),
        ((StepShape("a", ("b",)),), "unknown step 'b'"),
        ((StepShape("a", ("a",)),), "depends on itself"),
        ((StepShape("a", ("b",)), StepShape("b", ("a",))), "cycle"),
        ((StepShape("a"), StepShape("m", ("a",), "nope")), "neither 'run'"),
    ],
)
def test_bad_shapes_are_refused(steps: tuple[StepShape, ...], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        check_shape(FlowShape("f", steps=steps))


def test_topological_order_is_required_when_steps_are_added_one_by_one() -> None:
    shape = make_shape("f")
    with pytest.raises(ValidationError, match="unknown step 'b'"):
        shape.with_step(make_step("a", ["b"]))
    with pytest.raises(ValidationError, match="a string"):
        make_step("a", "b")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="max_attempts"):
        make_step("a", max_attempts=0)
    with pytest.raises(ValidationError, match="timeout"):
        make_step("a", timeout=0)
    mapped = make_step("m", map_over="a")
    assert mapped.depends_on == ("a",)  # a map over a step depends on it


def test_a_retry_reruns_what_did_not_complete_and_what_follows_from_step() -> None:
    shape = FlowShape(
        "r",
        steps=(
            StepShape("a"),
            StepShape("m", ("a",), "a"),
            StepShape("b", ("a",)),
            StepShape("c", ("m", "b")),
            StepShape("side"),
        ),
    )
    done = {"a": "completed", "m": "started", "b": "failed", "c": "created", "side": "completed"}
    plan = rerun(shape, done, {"a", "m", "b", "side"}, None)
    assert plan.steps == ("m", "b", "c")
    assert plan.in_place == {"m", "b"} and plan.forced == set()  # c has no tasks yet
    forced = rerun(shape, done, {"a", "m", "b", "side"}, "a")
    assert forced.steps == ("a", "m", "b", "c") and forced.forced == {"a", "m", "b", "c"}
    assert forced.in_place == {"a"}  # the others' inputs change: new tasks
    with pytest.raises(ValidationError, match="no step 'nope'"):
        rerun(shape, done, (), "nope")
