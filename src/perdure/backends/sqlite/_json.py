"""JSON containment with PostgreSQL ``jsonb @>`` semantics, for the SQLite backend.

`json_contains(doc, pattern)` is registered as a deterministic SQL function:

* an object contains another if every key of the pattern is present with a contained
  value;
* an array contains another if every element of the pattern is contained in some
  element of the document (order and duplicates do not matter);
* scalars must be equal: numbers by value (``1 == 1.0``), and ``true`` is not ``1``;
* PostgreSQL's one exception: a *top-level* array contains a bare scalar that it has
  as an element (``[1, 2] @> 1``), but a scalar never contains an array.

Numbers are parsed as exact decimals, as ``jsonb`` compares ``numeric`` values.
"""

from __future__ import annotations

import functools
import json
from decimal import Decimal
from typing import Any

__all__ = ["contains", "json_contains", "json_equal"]


_CACHED_LENGTH = 4096


def _load(text: str) -> Any:
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


_load_cached = functools.lru_cache(maxsize=1024)(_load)


def _parse(text: str) -> Any:
    # Small texts (patterns, typical payloads) are parsed once; parsed values are
    # shared through the cache, so nothing here ever mutates them.
    return _load_cached(text) if len(text) <= _CACHED_LENGTH else _load(text)


def _scalar_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, Decimal | int | float) and isinstance(b, Decimal | int | float):
        return bool(a == b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False


def _contains(doc: Any, pattern: Any) -> bool:
    if isinstance(pattern, dict):
        if not isinstance(doc, dict):
            return False
        for key, value in pattern.items():
            if key not in doc or not _contains(doc[key], value):
                return False
        return True
    if isinstance(pattern, list):
        if not isinstance(doc, list):
            return False
        for wanted in pattern:
            if isinstance(wanted, dict | list):
                if not any(_contains(item, wanted) for item in doc):
                    return False
            elif not any(
                not isinstance(item, dict | list) and _scalar_equal(item, wanted) for item in doc
            ):
                return False
        return True
    if isinstance(doc, dict | list):
        return False
    return _scalar_equal(doc, pattern)


def contains(doc: Any, pattern: Any) -> bool:
    """True if the decoded JSON value ``doc`` contains ``pattern`` (``jsonb @>``)."""
    if isinstance(doc, list) and not isinstance(pattern, dict | list):
        # The top-level exception: an array contains a primitive it has as an element.
        return any(
            not isinstance(item, dict | list) and _scalar_equal(item, pattern) for item in doc
        )
    return _contains(doc, pattern)


def json_contains(doc: str | None, pattern: str | None) -> int | None:
    """The SQL function: 1/0 for JSON texts, NULL if either is NULL."""
    if doc is None or pattern is None:
        return None
    return 1 if contains(_parse(doc), _parse(pattern)) else 0


def json_equal(a: str, b: str) -> bool:
    """True if two JSON texts hold the same value (numbers by value, ``true`` is not 1)."""
    return _equal(_parse(a), _parse(b))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_equal(value, b[key]) for key, value in a.items())
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(b, dict | list):
        return False
    return _scalar_equal(a, b)
