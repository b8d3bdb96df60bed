"""Flow control and schedules: per-tenant concurrency with fairness, a FIFO key per
account, a debounced start, and a cron schedule stored in the database.

Run it: python examples/tenants.py
"""

from perdure import App, Context

app = App()  # ./perdure.db, or PERDURE_DATABASE_URL


@app.workflow(concurrency=4, concurrency_key=lambda job: job["tenant"], key_concurrency=1)
async def export(ctx: Context, job: dict) -> str:
    # At most 4 exports at once, one per tenant; tenants take turns.
    return await ctx.step.run("export", lambda: f"{job['tenant']}/{job['n']}")


@app.workflow(fifo_key=lambda change: change["account"])
async def sync_account(ctx: Context, change: dict) -> int:
    # Changes of one account apply one at a time, in the order they were started.
    return await ctx.step.run("apply", lambda: change["seq"])


@app.workflow(schedule="0 9 * * MON-FRI", timezone="Europe/Paris")
async def daily_report(ctx: Context, tick: dict) -> str:
    return f"report for {tick['scheduled_at']}"


@app.workflow
async def reindex(ctx: Context, doc: dict) -> int:
    return await ctx.step.run("index", lambda: doc["rev"])


if __name__ == "__main__":
    exports = [app.start(export, {"tenant": t, "n": n}) for t in ("acme", "zeta") for n in range(3)]
    changes = [app.start(sync_account, {"account": "a1", "seq": s}) for s in range(3)]
    # Three edits within the window: one run, with the last input.
    edits = [app.start(reindex, {"id": "doc-1", "rev": r}, debounce_key="doc-1", debounce="1s")
             for r in range(3)]  # fmt: skip
    with app.worker(concurrency=8):
        print(sorted(h.result(timeout=60) for h in exports))
        print([h.result(timeout=60) for h in changes])
        print("reindexed rev", edits[0].result(timeout=60), "in", len({h.id for h in edits}), "run")
    for schedule in app.list_schedules():
        print(schedule.name, schedule.cron, schedule.timezone, "next:", schedule.next_at)
    app.close()
