"""The smallest perdure program: one workflow, one step, a worker in the background.

Run it: python examples/hello.py
"""

from perdure import App, Context

app = App()  # ./perdure.db, or PERDURE_DATABASE_URL


@app.workflow
async def hello(ctx: Context, name: str) -> str:
    return await ctx.step.run("greet", lambda: f"hello {name}")


if __name__ == "__main__":
    with app.worker():
        print(app.run(hello, "world", timeout=30))
    app.close()
