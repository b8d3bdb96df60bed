"""A longer workflow: parallel steps, a durable sleep, retries and a child workflow.

Run a worker for it in one terminal and start runs from another:

    perdure worker examples.onboarding:app
    perdure start onboard-user --input '{"email": "ada@example.com"}' --wait

or just: python examples/onboarding.py
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from perdure import App, Context, RetryPolicy

app = App()
_ids = itertools.count(1)
_flaky = itertools.count()


def create_user(email: str) -> dict[str, Any]:
    return {"id": f"user-{next(_ids)}", "email": email}


def send_email(user: dict[str, Any], template: str) -> dict[str, str]:
    # Fails on its first call to show a retry; the run parks during the backoff.
    if next(_flaky) == 0:
        raise ConnectionError("mail server unavailable")
    return {"to": user["email"], "template": template}


@app.workflow(name="welcome-kit")
async def welcome_kit(ctx: Context, user: dict[str, Any]) -> list[str]:
    items = ["stickers", "mug"]
    await asyncio.gather(*(ctx.step.run("pack", lambda i=i: i) for i in items))
    return items


@app.workflow(name="onboard-user", retention="7d")
async def onboard(ctx: Context, signup: dict[str, Any]) -> dict[str, Any]:
    user = await ctx.step.run("create-user", lambda: create_user(signup["email"]))
    await ctx.step.sleep("welcome-delay", "200ms")
    mail = await ctx.step.run(
        "send-welcome",
        lambda: send_email(user, "welcome"),
        retry=RetryPolicy(max_attempts=5, initial="100ms", max="1s"),
    )
    kit = await ctx.step.run_workflow("kit", welcome_kit, user)
    return {"user": user["id"], "mail": mail["template"], "kit": kit}


if __name__ == "__main__":
    with app.worker(concurrency=4):
        print(app.run(onboard, {"email": "ada@example.com"}, timeout=60))
    app.close()
