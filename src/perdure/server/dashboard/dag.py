"""A DAG flow's shape laid out for the dashboard (pure: no I/O).

Steps go in columns by depth (a root in column 0, any other step one column right of
its deepest dependency), in definition order within a column; every dependency is an
edge from the right side of one box to the left side of the other. With the step
states of a run, each box carries its status and its tasks' count."""

from __future__ import annotations

from dataclasses import dataclass

from ...flows.definition import FlowShape
from ...records import Step

__all__ = ["Dag", "Edge", "Node", "layout_dag"]

BOX_W = 150
BOX_H = 44
GAP_X = 70
GAP_Y = 22
PAD = 12


@dataclass(frozen=True, slots=True)
class Node:
    """One step's box."""

    name: str
    x: int
    y: int
    status: str
    is_map: bool
    note: str  # "map over pages", "3/5 tasks"...


@dataclass(frozen=True, slots=True)
class Edge:
    """One dependency, from the dependency's box to the dependent's."""

    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True, slots=True)
class Dag:
    """The boxes, the edges and the drawing's size."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int
    box_w: int = BOX_W
    box_h: int = BOX_H


def layout_dag(shape: FlowShape, steps: list[Step] | None = None) -> Dag:
    """Boxes and edges of ``shape``; ``steps`` (a run's `get_steps`) colours them."""
    depth: dict[str, int] = {}
    for step in shape.steps:  # definition order is topological
        depth[step.name] = 1 + max((depth[d] for d in step.depends_on), default=-1)
    rows: dict[int, int] = {}
    places: dict[str, tuple[int, int]] = {}
    for step in shape.steps:
        column = depth[step.name]
        row = rows.get(column, 0)
        rows[column] = row + 1
        places[step.name] = (PAD + column * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    states = {s.name: s for s in steps or ()}
    nodes = []
    for step in shape.steps:
        x, y = places[step.name]
        state = states.get(step.name)
        if state is not None and state.tasks:
            done = sum(1 for t in state.tasks if t.status == "completed")
            note = f"{done}/{len(state.tasks)} task{'s' if len(state.tasks) != 1 else ''}"
        elif step.map_over is not None:
            note = f"map over {step.map_over}"
        else:
            note = f"after {', '.join(step.depends_on)}" if step.depends_on else "root"
        nodes.append(
            Node(
                step.name,
                x,
                y,
                _status(state.status) if state is not None else "shape",
                step.map_over is not None,
                note,
            )
        )
    edges = []
    for step in shape.steps:
        x2, y2 = places[step.name]
        for dep in step.depends_on:
            x1, y1 = places[dep]
            edges.append(Edge(x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2))
    columns = max(depth.values(), default=0) + 1
    height = max(rows.values(), default=1)
    return Dag(
        tuple(nodes),
        tuple(edges),
        2 * PAD + columns * BOX_W + (columns - 1) * GAP_X,
        2 * PAD + height * BOX_H + (height - 1) * GAP_Y,
    )


def _status(state: str) -> str:
    """A step state as the run status whose colour it takes."""
    return {"created": "pending", "started": "running"}.get(state, state)
