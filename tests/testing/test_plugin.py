"""The pytest plugin, through real pytest sessions (pytester, in subprocesses so the
``pytest11`` entry point is loaded as a user's pytest loads it): the fixture
``perdure_env`` built from the user's ``perdure_app``, its options, and the example
of docs/testing.md, on both backends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _docs_blocks() -> list[str]:
    text = (ROOT / "docs" / "testing.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture(params=BACKENDS)
def options(request: pytest.FixtureRequest) -> list[str]:
    """Command-line options of the sub-session: none (SQLite), or the PostgreSQL URL."""
    base = ["-p", "no:cacheprovider", "-q"]
    if request.param == "sqlite":
        return base
    return [*base, "--perdure-database-url", request.getfixturevalue("pg_dsn")]


def test_the_docs_example_runs_through_the_fixture(
    pytester: pytest.Pytester, options: list[str]
) -> None:
    example, standalone, _processes = _docs_blocks()
    pytester.makepyfile(test_onboarding=example)
    pytester.makepyfile(
        test_standalone="from test_onboarding import app, onboard\n"
        + standalone
        + "\n\ndef test_sync():\n    check_the_nudge()\n"
        + "\n\ndef test_async():\n    import asyncio\n    asyncio.run(check_the_nudge_async())\n"
    )
    result = pytester.runpytest_subprocess(*options, timeout=150)
    result.assert_outcomes(passed=6)


def test_the_docs_worker_process_example_runs(
    pytester: pytest.Pytester, options: list[str]
) -> None:
    *_, example = _docs_blocks()
    package = pytester.mkpydir("myproject")
    (package / "workflows.py").write_text(
        "from perdure import App, Context\n\n"
        "app = App()\n\n\n"
        "@app.workflow\n"
        "async def report(ctx: Context, input: object) -> str:\n"
        "    return await ctx.step.run('send', lambda: 'sent')\n"
    )
    pytester.makepyfile(test_nightly=example)
    result = pytester.runpytest_subprocess(*options, timeout=150)
    result.assert_outcomes(passed=1)


def test_the_fixture_runs_where_it_is_told(pytester: pytest.Pytester, options: list[str]) -> None:
    pytester.makeconftest(
        """
        import pytest
        from perdure import App, Context

        app = App()

        @app.workflow
        async def hello(ctx: Context, name: str) -> str:
            await ctx.step.sleep("nap", "1d")
            return f"hello {name}"

        @pytest.fixture
        def perdure_app():
            return app
        """
    )
    pytester.makepyfile(
        """
        import pytest

        def test_where(perdure_env, request):
            url = request.config.getoption("perdure_database_url")
            if url:
                assert perdure_env.settings.schema.startswith("perdure_test_")
            else:
                assert perdure_env.settings.database_url.startswith("sqlite:///")
            assert perdure_env.auto_advance is False

        @pytest.mark.perdure(auto_advance=True)
        def test_marker(perdure_env):
            assert perdure_env.run("hello", "you", timeout=30) == "hello you"

        def test_fresh_each_time(perdure_env):
            assert perdure_env.list_runs().items == []
        """
    )
    result = pytester.runpytest_subprocess(*options, timeout=150)
    result.assert_outcomes(passed=3)


def test_without_perdure_app_the_fixture_says_what_to_write(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_needs_it(perdure_env):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=150)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*define a fixture named perdure_app*"])
