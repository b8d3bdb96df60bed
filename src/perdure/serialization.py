"""JSON encoding of inputs, outputs, payloads and errors (never pickle).

Values are encoded once to compact JSON text; the engine hands the *decoded* text
back to user code, so a step returns the same value on its first run and on replay.
Dataclasses and pydantic models become dicts; tuples become lists. NaN/Infinity,
NUL characters and lone surrogates are rejected because PostgreSQL cannot store them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import traceback
from typing import Any

from .errors import SerializationError

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "decode",
    "encode",
    "error_from_exception",
]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)  # pydantic v2
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"values of type {type(value).__name__} are not JSON")


def encode(value: Any, *, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Encode ``value`` as compact JSON text or raise `SerializationError` naming ``what``."""
    try:
        text = json.dumps(
            value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default
        )
    except RecursionError:
        raise SerializationError(f"{what} is nested too deeply to encode as JSON") from None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from None
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
    if size > max_bytes:
        raise SerializationError(
            f"{what} is {size} bytes of JSON, over the limit of {max_bytes} bytes"
        )
    return text


def decode(text: str | None) -> Any:
    """Decode JSON text written by `encode` (None stays None)."""
    if text is None:
        return None
    return json.loads(text)


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
