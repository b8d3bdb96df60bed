"""The dashboard says plainly that a run's replay diverged, and offers the ways out."""

from __future__ import annotations

import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from tests.engine.helpers import wait_for
from tests.engine.test_divergence import _app, _diverged, _start_on_a, code_a, renamed

from .harness import environment, server


def test_a_diverged_runs_page_says_so(database: Any, tmp_path: Path) -> None:
    calls: Counter[str] = Counter()
    app_a = _app(database, code_a, calls)
    app_b = _app(database, renamed, calls)
    try:
        run_id = _start_on_a(app_a)
        with app_b.worker():
            app_b.signal(run_id, "go", None)
            wait_for(lambda: _diverged(app_b, run_id))
    finally:
        app_a.close()
        app_b.close()
    with server(environment(database, tmp_path), tmp_path) as http:
        page = urllib.request.urlopen(f"{http.base}/runs/{run_id}", timeout=30)
        html = page.read().decode()
        page.close()
    assert "no longer replays this run" in html
    assert "replay diverged" in html and "NonDeterminismError" in html
    assert 'id="retry"' in html and 'id="cancel"' in html
