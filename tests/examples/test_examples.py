"""Every example in examples/ and every python block of the README runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _env(database) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = dict(os.environ)
    env["PERDURE_DATABASE_URL"] = database.url
    env["PERDURE_SCHEMA"] = database.schema
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(example: Path, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        env=_env(database),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip(), "an example prints its result"


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "# not run" not in b]


@pytest.mark.parametrize("index", range(len(_readme_blocks())))
def test_readme_python_blocks_run(index: int, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "snippet.py"
    script.write_text(_readme_blocks()[index])
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(database),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
