"""REST's own field names in the messages of errors raised below the REST edge: the
Python API names its parameters in snake_case (``next_cursor``, ``run_id``), the
wire in camelCase (``nextCursor``, ``runId``). One table, applied to every error
message the API answers with; quoted values (what the caller sent) are left as sent."""

from __future__ import annotations

import re

__all__ = ["rest_names"]

#: Python's name of a parameter -> the name a REST caller uses for it.
_NAMES = {
    "next_cursor": "nextCursor",
    "run_id": "runId",
    "parent_id": "parentId",
    "idempotency_key": "idempotencyKey",
    "retention_days": "retentionDays",
    "delay_seconds": "delaySeconds",
    "from_step": "fromStep",
    "include_superseded": "includeSuperseded",
    "input_match": "input",
    "catch_up": "catchUp",
    "seen_within": "seenWithin",
    "max_tasks": "maxTasks",
    "max_attempts": "maxAttempts",
    "base_delay": "baseDelay",
}
_NAME = re.compile(r"(?<![\w.])(" + "|".join(_NAMES) + r")(?!\w)")
#: A quoted value as ``repr`` writes it (its opening quote after no letter, unlike the
#: apostrophe of "run's"): the caller's own text, never renamed.
_QUOTED = re.compile(r"""((?<!\w)'[^']*'|(?<!\w)"[^"]*")""")


def rest_names(message: str) -> str:
    """``message`` with each Python parameter name outside quotes in REST's spelling."""
    parts = _QUOTED.split(message)
    for i in range(0, len(parts), 2):  # the even parts are outside quotes
        parts[i] = _NAME.sub(lambda found: _NAMES[found.group(1)], parts[i])
    return "".join(parts)
