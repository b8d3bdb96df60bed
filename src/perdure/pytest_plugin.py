"""The pytest plugin of perdure (registered through the ``pytest11`` entry point, so
installing perdure is enough): the fixture ``perdure_env``, a `TestEnvironment` on a
fresh database for each test, built from your app.

Point it at your app with a fixture named ``perdure_app``, usually in ``conftest.py``::

    @pytest.fixture
    def perdure_app():
        from myproject.workflows import app
        return app

Options: the marker ``@pytest.mark.perdure(auto_advance=True, database_url=...,
worker=False, schema=...)`` on a test, module or class; ``--perdure-database-url`` on the command
line or ``perdure_database_url`` in the ini file to run every environment on
PostgreSQL (each test gets a schema of its own).

The test environment itself is imported only when a test asks for ``perdure_env``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .app import App
    from .testing import TestEnvironment

__all__ = ["perdure_app", "perdure_env"]

_URL_HELP = (
    "database of the perdure_env fixture: a postgresql:// URL (a fresh schema per test) "
    "or an sqlite:/// file; default: a fresh SQLite file per test"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perdure")
    group.addoption("--perdure-database-url", default=None, help=_URL_HELP)
    parser.addini("perdure_database_url", _URL_HELP, default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "perdure(database_url=None, auto_advance=False, worker=True, schema=None): "
        "options of the perdure_env fixture",
    )


@pytest.fixture
def perdure_app() -> App:
    """Your `App`: override this fixture (in ``conftest.py``) to return it."""
    raise pytest.UsageError(
        "the perdure_env fixture needs your app: define a fixture named perdure_app that "
        "returns it, e.g. in conftest.py:\n\n"
        "    @pytest.fixture\n"
        "    def perdure_app():\n"
        "        from myproject.workflows import app\n"
        "        return app\n"
    )


@pytest.fixture
def perdure_env(request: pytest.FixtureRequest, perdure_app: App) -> Iterator[TestEnvironment]:
    """A `perdure.testing.TestEnvironment` of ``perdure_app``: a fresh database, a
    worker and a clock you move (``perdure_env.advance("7d")``), for one test."""
    from .testing import TestEnvironment

    options: dict[str, object] = {}
    for marker in reversed(list(request.node.iter_markers("perdure"))):
        options.update(marker.kwargs)  # the closest marker wins
    url = options.pop("database_url", None) or _configured_url(request.config)
    with TestEnvironment(perdure_app, url, **options) as env:  # type: ignore[arg-type]
        yield env


def _configured_url(config: pytest.Config) -> str | None:
    value = config.getoption("perdure_database_url") or config.getini("perdure_database_url")
    return str(value) if value else None
