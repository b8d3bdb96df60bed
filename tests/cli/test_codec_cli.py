"""The CLI with a payload codec: ``--app module:attribute`` brings the App's codec, so
commands print decoded values; without it they show only the sealed envelopes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from perdure import App
from perdure.codec import ENVELOPE, FernetCodec

PERDURE = [sys.executable, "-m", "perdure.cli.main"]

MODULE = textwrap.dedent(
    """
    import os
    from perdure import App
    from perdure.codec import FernetCodec

    app = App(codec=FernetCodec(os.environ["TEST_CODEC_KEY"]))
    """
)


def test_the_cli_decodes_with_the_apps_codec(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key = FernetCodec.generate_key()
    (tmp_path / "coded_app.py").write_text(MODULE)
    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": database.url,
        "PERDURE_SCHEMA": database.schema,
        "PYTHONPATH": str(tmp_path),
        "TEST_CODEC_KEY": key,
    }
    app = App(database.url, schema=database.schema, codec=FernetCodec(key))
    try:
        run_id = app.start("anything", {"secret": "s3cret-cli"}).id
    finally:
        app.close()

    def show(*global_options: str) -> dict[str, object]:
        done = subprocess.run(
            [*PERDURE, *global_options, "runs", "show", run_id, "--json"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        shown: dict[str, object] = json.loads(done.stdout)["run"]
        return shown

    assert show("--app", "coded_app:app")["input"] == {"secret": "s3cret-cli"}
    sealed = show()["input"]
    assert isinstance(sealed, dict) and ENVELOPE in sealed
    assert "s3cret-cli" not in json.dumps(sealed)
