"""Schemathesis hooks for test_fuzz.py, loaded in the schemathesis process through
``SCHEMATHESIS_HOOKS``: before each call the rows of every table are counted, and
the check ``refused_request_stores_nothing`` fails when a 4xx answer changed any
count. The database is named by ``FUZZ_DB_KIND``, ``FUZZ_DB_URL``, ``FUZZ_DB_PATH``
and ``FUZZ_DB_SCHEMA``; ``FUZZ_TALLY`` is a file that gets one line per refused
request checked (so the test knows the check ran)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import schemathesis

from tests.server.harness import RowCounter

_ROWS = RowCounter(
    SimpleNamespace(
        kind=os.environ["FUZZ_DB_KIND"],
        url=os.environ["FUZZ_DB_URL"],
        path=Path(os.environ["FUZZ_DB_PATH"]),
        schema=os.environ["FUZZ_DB_SCHEMA"],
    )
)
_before: dict[str, int] | None = None


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    global _before
    _before = _ROWS.count()


@schemathesis.check
def refused_request_stores_nothing(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request answered with a 4xx leaves every table as it was."""
    if not 400 <= response.status_code < 500 or _before is None:
        return None
    after = _ROWS.count()
    changed = {t: (_before.get(t), n) for t, n in after.items() if _before.get(t) != n}
    with open(os.environ["FUZZ_TALLY"], "a") as tally:
        tally.write(f"{response.status_code}\n")
    if changed:
        raise AssertionError(f"a {response.status_code} answer changed stored rows: {changed}")
    return True
