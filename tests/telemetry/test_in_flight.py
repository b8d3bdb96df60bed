"""``workflow_runs_in_flight`` counts every run not yet ended, as seed 000 defines it:
a run parked on a 7-day wait counts, under ``state="waiting"``, and ``state="running"``
keeps "executing now"."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from perdure import App, Context
from tests.engine.helpers import wait_for


def _in_flight(app: App) -> dict[tuple[str, str], float]:
    text = app.metrics().decode()
    family = next(f for f in text_string_to_metric_families(text) if f.name.endswith("in_flight"))
    return {(s.labels["workflow"], s.labels.get("state", "")): s.value for s in family.samples}


def test_the_in_flight_gauge_counts_a_parked_run(database: Any) -> None:
    app = App(database.url, schema=database.schema)

    @app.workflow
    async def verify(ctx: Context, user: str) -> str:
        await ctx.step.wait_for_event("verified", match={"user": user}, timeout="7d")
        return user

    try:
        with app.worker(concurrency=2):
            parked = app.start("verify", "u1")
            wait_for(lambda: app.get_run(parked.id).status == "waiting", 30)
            app.start("verify", "u2", delay="1h")  # pending, not due
            in_flight = _in_flight(app)
        assert in_flight[("verify", "waiting")] == 1
        assert in_flight[("verify", "pending")] == 1
        assert in_flight[("verify", "running")] == 0
        assert sum(v for (w, _), v in in_flight.items() if w == "verify") == 2
    finally:
        app.close()
