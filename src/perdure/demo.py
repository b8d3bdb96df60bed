"""The `perdure demo` workflow: orders that reserve items in parallel, charge,
sleep durably, and ship. Used by the CLI's ``demo`` command and its tests."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from typing import Any

from .app import App
from .context import Context

__all__ = ["build_demo_app", "demo_orders"]


def _work(seconds: float) -> None:
    time.sleep(seconds)  # a sync step: runs in the worker's thread pool


def reserve(item: str) -> dict[str, Any]:
    """Pretend to reserve one item in a warehouse."""
    _work(random.uniform(0.05, 0.25))
    return {"item": item, "bin": f"B{random.randint(1, 99):02d}"}


def charge(order: dict[str, Any]) -> dict[str, Any]:
    """Pretend to charge a card."""
    _work(random.uniform(0.05, 0.2))
    return {"amount": round(9.5 * len(order["items"]), 2), "currency": "EUR"}


def ship(order: dict[str, Any]) -> dict[str, Any]:
    """Pretend to book a parcel."""
    _work(random.uniform(0.05, 0.2))
    return {"tracking": f"TRK{abs(hash(order['id'])) % 10**8:08d}"}


def build_demo_app(database_url: str | None = None) -> App:
    """An `App` with the demo workflow ``demo.order`` registered."""
    app = App(database_url)

    @app.workflow(name="demo.order")
    async def order(ctx: Context, order: dict[str, Any]) -> dict[str, Any]:
        reservations = await asyncio.gather(
            *(ctx.step.run("reserve", functools.partial(reserve, item)) for item in order["items"])
        )
        payment = await ctx.step.run("charge", lambda: charge(order))
        await ctx.step.sleep("cool-off", order.get("cool_off", "2s"))
        parcel = await ctx.step.run("ship", lambda: ship(order))
        return {
            "order": order["id"],
            "bins": [r["bin"] for r in reservations],
            "charged": payment["amount"],
            "tracking": parcel["tracking"],
        }

    return app


def demo_orders(count: int, cool_off: str = "2s") -> list[dict[str, Any]]:
    """Inputs for ``count`` demo runs."""
    catalogue = ["book", "lamp", "mug", "plant", "pen", "chair"]
    return [
        {
            "id": f"order-{n + 1}",
            "items": random.sample(catalogue, k=1 + n % 3),
            "cool_off": cool_off,
        }
        for n in range(count)
    ]
