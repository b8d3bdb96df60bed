"""JSON encoding of inputs, outputs, payloads and errors (never pickle).

Values are encoded once to compact JSON text; the engine hands the *decoded* text
back to user code, so a step returns the same value on its first run and on replay.
Dataclasses and pydantic models become dicts; tuples become lists. NaN/Infinity,
NUL characters and lone surrogates are rejected because PostgreSQL cannot store them.

The limits are the same at every entry (DESIGN §4 Values): at most `MAX_PAYLOAD_BYTES`
(10 MiB) of JSON and `MAX_DEPTH` (64) levels of nesting, so no stored value can be one a
worker then fails to decode. Floats round-trip exactly on both backends: PostgreSQL's
``jsonb`` keeps a number's digits but not Python's float/int distinction, so an integral
float that Python writes with an exponent (``1e+16``) is written out in full with a
``.0`` (``10000000000000000.0``), which ``jsonb`` keeps and which reads back as a float.
"""

from __future__ import annotations

import dataclasses
import json
import re
import traceback
from decimal import Decimal
from typing import Any

from .errors import SerializationError

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "Undecodable",
    "decode",
    "decode_stored",
    "encode",
    "error_from_exception",
]

MAX_PAYLOAD_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_PAYLOAD_BYTES = MAX_PAYLOAD_BYTES
MAX_DEPTH = 64
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# An exponent number outside a string: strings are matched first and kept as they are.
_STRING_OR_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?[eE][-+]?\d+)')
_EXPONENT_HINT = re.compile(r"\d[eE][-+]?\d")


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)  # pydantic v2
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"values of type {type(value).__name__} are not JSON")


def encode(value: Any, *, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Encode ``value`` as compact JSON text or raise `SerializationError` naming ``what``.

    Raises when the value is not JSON, holds NUL or a lone surrogate, is nested more
    than `MAX_DEPTH` levels, or encodes to more than ``max_bytes`` (at most 10 MiB).
    """
    try:
        text = json.dumps(
            value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default
        )
    except RecursionError:
        raise SerializationError(
            f"{what} is nested more than {MAX_DEPTH} levels deep, the limit"
        ) from None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from None
    check_text(text, what=what, max_bytes=max_bytes)
    if _EXPONENT_HINT.search(text):
        text = _STRING_OR_EXPONENT.sub(_exact_float, text)
    return text


def check_text(text: str, *, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
    """Check JSON text against the stored-value limits (size, depth, NUL, surrogates)."""
    limit = min(max_bytes, MAX_PAYLOAD_BYTES)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise SerializationError(
            f"{what} contains a lone surrogate character, which cannot be stored"
        ) from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise SerializationError(
            f"{what} contains a NUL character (\\u0000), which cannot be stored"
        )
    if size > limit:
        raise SerializationError(f"{what} is {size} bytes of JSON, over the limit of {limit} bytes")
    # Fewer opening brackets than the limit cannot nest deeper than it (cheap, in C).
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise SerializationError(f"{what} is nested more than {MAX_DEPTH} levels deep, the limit")


def _depth(text: str) -> int:
    """The deepest nesting of JSON text, brackets inside strings not counted."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _exact_float(match: re.Match[str]) -> str:
    number = match.group(1)
    if number is None:
        return match.group(0)  # a string
    if float(number).is_integer():  # jsonb would otherwise read it back as an int
        return format(Decimal(number), "f") + ".0"
    return number


def decode(text: str | None) -> Any:
    """Decode JSON text written by `encode` (None stays None).

    Raises `SerializationError` for text that is not JSON or is nested too deeply to
    decode (only a value written around the engine's checks can be).
    """
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise SerializationError(f"a stored value is nested more than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise SerializationError(f"a stored value is not valid JSON: {exc}") from None


class Undecodable(str):
    """A stored value the engine cannot decode (written around its checks, e.g. by hand).

    It reads as a short text saying so, so listings and the API still show the run;
    a worker that claims such a run fails it as ``PoisonRun`` instead of dying."""

    __slots__ = ()


def decode_stored(text: str | bytes | None) -> Any:
    """Decode a value read from the database; an undecodable one becomes `Undecodable`."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        return Undecodable(f"<undecodable: nested more than {MAX_DEPTH} levels>")
    except ValueError as exc:
        return Undecodable(f"<undecodable: {str(exc)[:200]}>")


def error_from_exception(exc: BaseException, **extra: Any) -> dict[str, Any]:
    """A JSON-safe description of an exception: type, message, traceback and extras."""
    message = str(exc)
    if len(message) > 4000:
        message = message[:4000] + "…"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(tb) > 16000:
        tb = tb[-16000:]
    error: dict[str, Any] = {"type": type(exc).__name__, "message": message, "traceback": tb}
    error.update({key: value for key, value in extra.items() if value is not None})
    # Make sure what we store is JSON even if a message holds odd characters.
    try:
        encode(error, what="error")
    except SerializationError:
        error = {
            "type": type(exc).__name__,
            "message": message.encode("utf-8", "replace").decode().replace("\x00", ""),
        }
    return error


def brief_error(error: dict[str, Any] | None) -> dict[str, Any]:
    """The type and message of a serialized error (what an audit event records)."""
    error = error or {}
    return {"type": error.get("type"), "message": error.get("message")}
