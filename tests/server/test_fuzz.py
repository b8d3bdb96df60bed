"""A bounded schemathesis run against a live server's /openapi.json: no request it
generates (valid or not) gets a server error, and every answer matches the schema.
(The live stream of a run is left out: it lasts as long as the run; test_rest.py
covers it.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .harness import environment, server

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
    ]
)


def test_no_generated_request_gets_a_server_error(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{http.base}/openapi.json",
                "--checks",
                CHECKS,
                "--max-examples",
                "25",
                # a run's stream lasts as long as the run: fuzzed runs never end
                "--exclude-path-regex",
                "/stream$",
                "--seed",
                "20261125",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


TOKEN = "fuzz-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


def test_no_request_the_schema_refuses_is_taken_or_stores_anything(  # type: ignore[no-untyped-def]
    database, tmp_path: Path
) -> None:
    """Negative generation: requests that break the schema (a boolean for a number,
    a number for a time, a status the action cannot take, a field missing...) each
    get a 4xx, and a 4xx leaves every table as it was (fuzz_hooks.py counts the rows
    around each call). JSON bodies, the token in the Authorization header."""
    env = environment(database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    tally = tmp_path / "refused.txt"
    with server(env, tmp_path, token=TOKEN) as http:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{http.base}/openapi.json",
                "--mode",
                "negative",
                "--checks",
                "negative_data_rejection,not_a_server_error,refused_request_stores_nothing",
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--phases",
                "coverage,fuzzing",
                "--max-examples",
                "5",
                "--exclude-path-regex",
                "/stream$",
                "--seed",
                "20261128",
                "--workers",
                "1",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "SCHEMATHESIS_HOOKS": str(ROOT / "tests" / "server" / "fuzz_hooks.py"),
                "FUZZ_DB_KIND": database.kind,
                "FUZZ_DB_URL": database.url,
                "FUZZ_DB_PATH": str(database.path),
                "FUZZ_DB_SCHEMA": database.schema,
                "FUZZ_TALLY": str(tally),
            },
        )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert len(tally.read_text().splitlines()) > 200  # the row check saw the refusals
