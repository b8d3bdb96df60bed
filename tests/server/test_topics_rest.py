"""Seed 000's subscription route, ``POST /v1/topics/{pattern}/subscriptions`` with
``{"type": "workflow", "workflow": ...}``, beside ``POST /v1/subscriptions``: a real
`perdure serve` and a real worker on each backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.engine.helpers import wait_for

from .harness import Http, environment, process, server

TOPIC = "/v1/topics/{}/subscriptions"


def _workers(http: Http) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get("/v1/workers").body["items"]
    return items


def test_the_seed_topic_route_subscribes_a_workflow(database: Any, tmp_path: Path) -> None:
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http, process(["worker", "rest_app:app"], env, tmp_path):
        made = http.post(TOPIC.format("order.*"), {"type": "workflow", "workflow": "greet"})
        assert made.status == 201, made.body
        assert made.body == {"pattern": "order.*", "workflow": "greet", "changed": True}
        again = http.post(TOPIC.format("order.*"), {"type": "workflow", "name": "greet"})
        assert again.status == 200 and again.body["changed"] is False  # the seed's `name`

        # Refused bodies store nothing: another target type, no workflow, or two.
        for bad in (
            {"type": "queue", "workflow": "approval"},
            {"type": "workflow"},
            {"type": "workflow", "workflow": "approval", "name": "approval"},
            {"workflow": "approval"},
            {"type": "workflow", "workflow": "approval", "extra": 1},
        ):
            refused = http.post(TOPIC.format("user.*"), bad)
            assert refused.status == 422, (bad, refused.body)
        assert http.get("/v1/subscriptions").body["items"] == [
            {"pattern": "order.*", "workflow": "greet", "changed": False}
        ]

        # A subscription starts workflows the database knows: wait for the worker's.
        wait_for(lambda: any("greet@1" in w["workflows"] for w in _workers(http)), 20)
        published = http.post("/v1/events/order.placed", "bob").body
        assert len(published["started"]) == 1
        run_id = published["started"][0]
        done = wait_for(
            lambda: (
                (r := http.get(f"/v1/workflows/greet/runs/{run_id}").body)["status"] == "completed"
                and r
            ),
            20,
        )
        assert done["output"] == "hi bob"
