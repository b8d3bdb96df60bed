"""The reference docs keep up with the code: every `perdure` command (and each of its
options) is in docs/cli.md, and every REST route in docs/api.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click

from perdure.cli.main import cli

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found.update(_commands(command, path + " "))
        else:
            found[path] = command
    return found


def _rows(page: str, command: str) -> list[str]:
    """The table rows and bullets of ``page`` that document ``command``: a code span
    that starts with it."""
    span = re.compile(r"`" + re.escape(command) + r"(?=[` \[])")
    return [line for line in page.splitlines() if span.search(line)]


def test_every_cli_command_and_option_is_in_the_cli_docs() -> None:
    page = (DOCS / "cli.md").read_text()
    missing, undocumented = [], []
    for path, command in sorted(_commands(cli).items()):
        rows = _rows(page, path)
        if not rows:
            missing.append(path)
            continue
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                longest = max(param.opts, key=len)
                if not any(longest in row for row in rows):
                    undocumented.append(f"{path} {longest}")
    assert not missing, f"commands missing from docs/cli.md: {missing}"
    assert not undocumented, f"options missing from their command's row: {undocumented}"
    for param in cli.params:  # the global options, on the page's first line
        if isinstance(param, click.Option):
            assert max(param.opts, key=len) in page.splitlines()[2], param.opts


_ROUTES = """
import json
import sys
from perdure import App
from perdure.server import create_server
app = App(sys.argv[1])
paths = create_server(app).openapi()["paths"]
print(json.dumps(sorted([m.upper(), p] for p, methods in paths.items() for m in methods)))
app.close()
"""


def _served_routes(folder: Path) -> list[tuple[str, str]]:
    # A process of its own: building the server turns on this process's metrics.
    url = f"sqlite:///{folder / 'routes.db'}"
    out = subprocess.run(
        [sys.executable, "-c", _ROUTES, url], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    listed = out.stdout
    return [(method, path) for method, path in json.loads(listed)]


def _shape(route: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", route)


def test_every_rest_route_is_in_the_api_docs(tmp_path: Path) -> None:
    page = (DOCS / "api.md").read_text()
    documented = {
        (method, _shape(path))
        for method, path in re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`?\s]*)", page)
    }
    served = [
        (method, path)
        for method, path in _served_routes(tmp_path)
        if path.startswith("/v1/") or path in ("/healthz", "/metrics")
    ]
    assert len(served) > 20
    missing = [f"{m} {p}" for m, p in served if (m, _shape(p)) not in documented]
    assert not missing, f"routes missing from docs/api.md: {missing}"
