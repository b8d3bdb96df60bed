"""``perdure init [DIR]``: scaffold a project that works at once.

It writes the config (``perdure.toml``: the SQLite database beside it, discovery
under ``workflows/``), a ``workflows`` package with one sample workflow, a test on
the test clock with its ``conftest.py``, and a README with the commands. It never
overwrites a file: when one of them exists nothing is written (a README that exists
is kept, and the commands are printed instead).
"""

from __future__ import annotations

from pathlib import Path

import click

from .output import console, fail

__all__ = ["SCAFFOLD", "init"]

_CONFIG = """\
# perdure's config: every `perdure` command run in this directory (or below) reads it.
# Flags win over it, and PERDURE_DATABASE_URL over database_url. docs/cli.md#config
database_url = "sqlite:///perdure.db"  # relative to this file; or postgresql://...
paths = ["workflows"]                  # discovery: the modules that register workflows
ignore = []                            # globs of modules discovery skips

[worker]
concurrency = 10
lease = "30s"

[server]
host = "127.0.0.1"
port = 8000
"""

_PACKAGE = '''\
"""This project's workflows: discovery imports every module in this package."""
'''

_APP = '''\
"""The project's App: every module in this package registers its workflows on it."""

from perdure import App

# Its database comes from perdure.toml (or PERDURE_DATABASE_URL) through the CLI.
app = App()
'''

_SAMPLE = '''\
"""A sample workflow: two steps with a durable sleep between them."""

from perdure import Context

from .app import app


def greet(name: str) -> str:
    return f"hello {name}"


def sign(greeting: str) -> str:
    return f"{greeting}, from perdure"


@app.workflow
async def hello(ctx: Context, name: str) -> str:
    greeting = await ctx.step.run("greet", greet, name)
    await ctx.step.sleep("pause", "2s")  # durable: a restarted worker resumes after it
    return await ctx.step.run("sign", sign, greeting)
'''

_CONFTEST = '''\
"""pytest: the project's modules are importable, and `perdure_env` tests its App."""

import pytest

from perdure import App
from workflows.app import app


@pytest.fixture
def perdure_app() -> App:
    return app
'''

_TEST = '''\
"""The sample workflow on the test clock: its sleep passes without waiting."""

from workflows.hello import hello


def test_hello_greets_and_signs(perdure_env):
    handle = perdure_env.start(hello, "world")
    perdure_env.advance("2s")  # the database clock moves; the sleep ends at once
    assert handle.result(timeout=30) == "hello world, from perdure"
'''

_COMMANDS = """\
perdure worker                       # serve the workflows under workflows/
perdure start hello --input '"world"'
perdure runs list
perdure serve                        # the REST API and the dashboard on :8000
pytest                               # the tests, on the test clock
"""

_README = f"""\
# My perdure project

Durable workflows with perdure: the config is
`perdure.toml`, the workflows are in `workflows/`, their tests in `tests/`.

```sh
{_COMMANDS}```
"""

#: The files ``perdure init`` writes, by path relative to DIR.
SCAFFOLD: dict[str, str] = {
    "perdure.toml": _CONFIG,
    "workflows/__init__.py": _PACKAGE,
    "workflows/app.py": _APP,
    "workflows/hello.py": _SAMPLE,
    "conftest.py": _CONFTEST,
    "tests/test_hello.py": _TEST,
}


@click.command()
@click.argument("directory", metavar="[DIR]", default=".", type=click.Path(file_okay=False))
def init(directory: str) -> None:
    """Scaffold a project in DIR (default: here): perdure.toml, a workflows/ package
    with a sample workflow, a test on the test clock, and a README with the commands.
    Existing files are never overwritten: if one is in the way, nothing is written."""
    root = Path(directory)
    existing = [name for name in SCAFFOLD if (root / name).exists()]
    if existing:
        fail(f"{', '.join(existing)} exist(s) in {root}: nothing written", code=2)
    for name, text in SCAFFOLD.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        console.print(f"wrote {path}")
    readme = root / "README.md"
    if readme.exists():
        console.print(f"{readme} exists: kept. The commands:")
        console.print(_COMMANDS, end="")
    else:
        readme.write_text(_README)
        console.print(f"wrote {readme}")
    console.print(f"next: cd {root} && perdure worker")
