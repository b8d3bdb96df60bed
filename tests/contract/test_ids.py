"""Contract: run ids and idempotency keys a caller chooses follow one character rule at
every Python entry (docs/limits.md), so every id stored can be addressed as one URL
path segment. Anything else is a `ValidationError`, and nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from perdure import App, Context, ValidationError
from perdure.flows.dsl import TaskContext

pytestmark = pytest.mark.timeout(120)

VICTIM = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

#: Ids the rule refuses: a '/', a '..' path, the dot segments, control characters
#: (C0, DEL, C1), what ends or escapes a path segment, and the length limits.
BAD_IDS = [
    "tenant/42",
    f"zz/../{VICTIM}",
    "/",
    "..",
    ".",
    "line\nbreak",
    "tab\there",
    "nul\x00",
    "bell\x07",
    "del\x7f",
    "next-line\x85",
    "query?x=1",
    "frag#1",
    "pct%2F",
    "back\\slash",
    "",
    "k" * 256,
]

#: Ids it allows: spaces, ':', '@', dots inside, non-ASCII letters.
GOOD_IDS = ["tenant 42", "order:42@eu-west", "café ✓ 日本", "a..b", "...", "x" * 255]


@pytest.fixture
def app(database) -> Iterator[App]:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, sweep_interval=0)

    @app.workflow(name="wf")
    async def wf(ctx: Context, value: Any) -> Any:
        return value

    flow = app.flow("fl")

    @flow.step
    async def only(ctx: TaskContext, input: Any) -> int:
        return 1

    app.list_workflows()  # opens the database and registers both
    yield app
    app.close()


def _stored(app: App) -> list[str]:
    return sorted(r.id for r in app.list_runs(limit=100).items)


def test_ids_outside_the_rule_are_refused_with_nothing_stored_and_the_rest_found(app: App) -> None:
    target = app.start("wf", 1, run_id="target").id
    events = [e.type for e in app.get_events(target)]
    for bad in BAD_IDS:
        with pytest.raises(ValidationError, match="run_id must be 1-255 characters"):
            app.start("wf", 1, run_id=bad)
        with pytest.raises(ValidationError, match="run_id must be"):
            app.start("fl", {}, run_id=bad)
        with pytest.raises(ValidationError, match="run_id must be"):
            app.run("wf", 1, run_id=bad, timeout=1)
        with pytest.raises(ValidationError, match="idempotency_key must be"):
            app.start("wf", 1, idempotency_key=bad)
        with pytest.raises(ValidationError, match="idempotency_key must be"):
            app.start("fl", {}, idempotency_key=bad)
        with pytest.raises(ValidationError, match="idempotency_key must be"):
            app.signal(target, "poke", 1, idempotency_key=bad)
        with pytest.raises(ValidationError, match="idempotency_key must be"):
            app.publish("poke", 1, idempotency_key=bad)
    assert _stored(app) == ["target"]
    assert [e.type for e in app.get_events(target)] == events  # no signal either

    # What the rule allows is stored and found again, as given.
    for good in GOOD_IDS:
        handle = app.start("wf", good, run_id=good, idempotency_key=good)
        assert handle.created and handle.id == good
        assert app.get_run(good).input == good
        assert app.signal(good, "poke", 1, idempotency_key=good)
        assert app.cancel(good)
        assert app.get_run(good).status == "cancelled"
    flow_run = app.start("fl", {}, run_id="flow run: é@1")
    assert app.get_run(flow_run.id).id == "flow run: é@1"
    assert _stored(app) == sorted([*GOOD_IDS, "flow run: é@1", "target"])
