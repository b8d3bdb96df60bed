"""Hypothesis strategies for random flow shapes, shared by the planner's tests and the
property test that runs random flows through both backends."""

from __future__ import annotations

from hypothesis import strategies as st

from perdure.flows.definition import RUN, FlowShape, StepShape


@st.composite
def shapes(
    draw: st.DrawFn, max_steps: int = 12, name: str = "rand", bounded: bool = False
) -> FlowShape:
    """A random valid shape: each step depends on a random subset of the earlier ones,
    and may map over the run or over one of its dependencies. ``bounded``: the flow
    and its map steps may have a small ``max_tasks`` (1 to 3), so some maps fail for
    their length."""
    count = draw(st.integers(min_value=1, max_value=max_steps))
    steps: list[StepShape] = []
    for i in range(count):
        earlier = [s.name for s in steps]
        deps = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)) if earlier else []
        kind = draw(st.sampled_from(["single", "single", "map"]))
        map_over = None
        max_tasks = None
        if kind == "map":
            map_over = draw(st.sampled_from([RUN, *deps]))
            if bounded:
                max_tasks = draw(st.sampled_from([None, None, 1, 2, 3]))
        steps.append(StepShape(f"s{i}", tuple(deps), map_over, max_tasks=max_tasks))
    flow_bound = draw(st.sampled_from([10_000, 10_000, 2])) if bounded else 10_000
    return FlowShape(name, steps=tuple(steps), max_tasks=flow_bound)
