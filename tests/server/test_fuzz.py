"""A bounded schemathesis run against a live server's /openapi.json: no request it
generates (valid or not) gets a server error, and every answer matches the schema.
(The live stream of a run is left out: it lasts as long as the run; test_rest.py
covers it.)"""

from __future__ import annotations

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
