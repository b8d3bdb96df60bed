"""The ``all`` extra holds what a user runs, and the test tools are in ``dev`` (issue
42, point 7): ``pip install 'perdure[all]'`` puts no pytest, mypy, ruff or
schemathesis into a production image, and ``make test`` installs ``.[all,dev]``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = {"postgres", "server", "otel", "metrics", "crypto"}
TOOLS = {"pytest", "pytest-asyncio", "hypothesis", "mypy", "ruff", "schemathesis", "playwright"}


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert found is not None, requirement
    return found.group().lower()


def test_all_is_the_runtime_extras_and_dev_holds_the_test_tools() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (everything,) = extras["all"]
    included = set(re.fullmatch(r"perdure\[([a-z,]+)\]", everything).group(1).split(","))  # type: ignore[union-attr]
    assert included == RUNTIME
    installed = {_name(r) for extra in included for r in extras[extra]}
    assert not installed & TOOLS, installed & TOOLS
    assert {_name(r) for r in extras["dev"]} >= TOOLS


def test_make_test_installs_all_and_dev_and_the_quick_start_is_unchanged() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert 'pip install --quiet -e ".[all,dev]"' in target
    readme = (ROOT / "README.md").read_text()
    assert "make demo    # installs perdure" in readme and "make test    # installs" in readme
    assert "`dev`" in readme
