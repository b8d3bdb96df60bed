"""A DAG flow (pgflow's model on perdure): fetch a site, then score and summarise it
in parallel, visit each of its links (a map step: one task per link), and save.

Run it: python examples/analyze_website.py
"""

from __future__ import annotations

from typing import Any

from perdure import App, TaskContext

app = App()  # ./perdure.db, or PERDURE_DATABASE_URL

analyze = app.flow("analyze_website", max_attempts=3, base_delay=1, timeout=30)


@analyze.step
async def website(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    url = input["run"]["url"]  # a root step gets {"run": <the run's input>}
    return {"content": f"<html>welcome to {url}</html>", "links": [f"{url}/a", f"{url}/b"]}


@analyze.step(depends_on=[website], max_attempts=5)
async def sentiment(ctx: TaskContext, input: dict[str, Any]) -> dict[str, float]:
    return {"score": 0.8 if "welcome" in input["website"]["content"] else 0.2}


@analyze.step(depends_on=[website])
def summary(ctx: TaskContext, input: dict[str, Any]) -> str:  # sync handlers run in a thread
    return input["website"]["content"][:20]


@analyze.step(depends_on=[website])
async def links(ctx: TaskContext, input: dict[str, Any]) -> list[str]:
    return list(input["website"]["links"])


@analyze.map(over=links)
async def visit(ctx: TaskContext, link: str) -> int:  # one task per element
    return len(link)


@analyze.step(depends_on=[sentiment, summary, visit])
async def save(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    return {
        "url": input["run"]["url"],
        "score": input["sentiment"]["score"],
        "summary": input["summary"],
        "visited": len(input["visit"]),
    }


if __name__ == "__main__":
    with app.worker(concurrency=4):
        handle = app.start(analyze, {"url": "https://example.com"})
        print(handle.result(timeout=60))  # the run's output: {leaf step: its output}
        for step in app.get_steps(handle.id):
            print(f"  {step.name:10} {step.status:10} tasks={len(step.tasks)}")
    app.close()
