"""Count database commits per run and per step of a 3-step workflow on PostgreSQL.

Usage: python bench/commits.py [--runs 500] [--url postgresql://postgres@127.0.0.1/postgres]

Uses a dedicated database (perdure_commits) so that pg_stat_database.xact_commit
counts only perdure's own transactions; closes every connection before reading
the counter, because backends flush their statistics when they exit.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from perdure import App, Context


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    admin = psycopg.connect(args.url, autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS perdure_commits WITH (FORCE)")
    admin.execute("CREATE DATABASE perdure_commits")
    url = args.url.rsplit("/", 1)[0] + "/perdure_commits"

    def commits() -> int:
        time.sleep(0.5)
        row = admin.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = 'perdure_commits'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    app = App(url)

    @app.workflow
    async def three(ctx: Context, n: int) -> int:
        a = await ctx.step.run("a", lambda: n + 1)
        b = await ctx.step.run("b", lambda: a + 1)
        return await ctx.step.run("c", lambda: b + 1)

    app.list_workflows()  # migrate and register before counting
    app.close()
    before = commits()
    app = App(url)
    app.workflow(three)
    handles = [app.start(three, n) for n in range(args.runs)]
    app.close()
    after_starts = commits()
    app = App(url)
    app.workflow(three)
    started = time.perf_counter()
    with app.worker(concurrency=args.concurrency) as worker:
        while True:  # one read per 50 ms to see the end
            counts = {w.name: w.counts for w in app.list_workflows()}["three"]
            if counts["completed"] == args.runs:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        claimed = worker.claimed
    app.close()
    after = commits()
    assert len(handles) == args.runs
    starts = after_starts - before
    work = after - after_starts
    steps = 3 * args.runs
    print(f"starts: {starts} commits for {args.runs} runs ({starts / args.runs:.2f} per run)")
    print(
        f"execution: {work} commits for {steps} steps in {elapsed:.2f}s "
        f"({work / steps:.2f} per step, {work / args.runs:.2f} per run; {claimed} claims; "
        "includes worker start/stop and the completion polling reads)"
    )
    print(f"end to end: {(starts + work) / args.runs:.2f} commits per 3-step run")


if __name__ == "__main__":
    main()
