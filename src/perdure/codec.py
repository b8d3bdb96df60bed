"""Payload codecs: values encoded (e.g. encrypted) before they reach the database.

``App(codec=...)`` takes any object with ``encode(value) -> str`` and
``decode(text) -> value`` (the `Codec` protocol). Every input, output, step result,
signal and event payload and value set by ``ctx.set`` is stored as an envelope, a JSON
object ``{"~codec": "<the codec's text>"}``, and decoded again for the workers and the
API, so the database never holds the plaintext. Top-level keys the codec names in
its optional ``clear`` attribute are copied beside the envelope in clear, so SQL-side
``match`` (``wait_for_event(match=...)``, ``list_runs(input_match=...)``) can still
use them; a match on any other key is refused, because it could never match.

`FernetCodec` is the ready one: authenticated encryption (AES-128-CBC with
HMAC-SHA256, the ``cryptography`` package's Fernet) with keys only the application
holds. Install it with ``pip install 'perdure[crypto]'``. See docs/security.md.

What stays in clear: workflow and step names, event names, idempotency keys, times,
statuses and errors (exception types and messages; keep secrets out of them).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any, Protocol, runtime_checkable

from .errors import (
    ConfigurationError,
    MissingDependencyError,
    SerializationError,
    ValidationError,
)
from .serialization import Undecodable

__all__ = [
    "ENVELOPE",
    "Codec",
    "CodecError",
    "FernetCodec",
    "clear_keys",
    "is_sealed",
    "open_value",
    "seal",
    "unreadable",
]

#: The key of the envelope object a coded value is stored as.
ENVELOPE = "~codec"


@runtime_checkable
class Codec(Protocol):
    """What ``App(codec=...)`` takes: text in the database, values in the code.

    ``encode`` gets a JSON value (dict, list, str, int, float, bool or None) and returns
    text; ``decode`` gets that text back and returns the value. Text (not bytes)
    because every stored value is JSON: binary output must be made text (base64), as
    `FernetCodec`'s tokens already are. An optional ``clear`` attribute (a collection of
    top-level keys) names the fields also stored in clear for SQL-side matching.
    """

    def encode(self, value: Any) -> str:
        """The stored text of ``value``."""
        ...

    def decode(self, data: str) -> Any:
        """The value whose stored text is ``data``."""
        ...


class CodecError(SerializationError):
    """A stored value the codec cannot decode (a wrong or missing key, tampering)."""


def clear_keys(codec: Codec) -> frozenset[str]:
    """The top-level keys ``codec`` keeps in clear (its ``clear`` attribute)."""
    keys = getattr(codec, "clear", ())
    return frozenset(keys or ())


def check_codec(codec: object) -> Codec:
    """``codec`` if it has callable ``encode`` and ``decode``, else `ConfigurationError`."""
    if not (callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))):
        raise ConfigurationError(
            f"codec must have encode(value) -> str and decode(str) -> value, got {codec!r}"
        )
    clear = getattr(codec, "clear", ())
    if isinstance(clear, str) or not all(isinstance(k, str) for k in clear or ()):
        raise ConfigurationError(f"codec.clear must be a collection of key names, got {clear!r}")
    return codec  # type: ignore[return-value]


def seal(codec: Codec, value: Any) -> dict[str, Any]:
    """The envelope of ``value``: the codec's text, plus the clear keys of a dict."""
    text = codec.encode(value)
    if not isinstance(text, str):
        raise SerializationError(
            f"the codec's encode() returned {type(text).__name__}, not str (encode bytes as "
            "text, e.g. base64)"
        )
    envelope: dict[str, Any] = {ENVELOPE: text}
    if isinstance(value, dict):
        for key in clear_keys(codec):
            if key in value:
                envelope[key] = value[key]
    return envelope


def is_sealed(value: Any) -> bool:
    """True if ``value`` is an envelope."""
    return isinstance(value, dict) and isinstance(value.get(ENVELOPE), str)


def unreadable(value: Any) -> bool:
    """True if ``value`` is a sealed value this process could not open: an envelope
    (read without a codec) or an `Undecodable` marker (a codec that cannot open it).
    No code may compute on such a value (docs/security.md)."""
    return isinstance(value, Undecodable) or is_sealed(value)


def open_value(codec: Codec, value: Any) -> Any:
    """The value inside an envelope; anything else as it is (values stored before the
    codec was set, or by SQL producers, are read in clear). Raises `CodecError`."""
    if not is_sealed(value):
        return value
    try:
        return codec.decode(value[ENVELOPE])
    except Exception as exc:
        raise CodecError(f"the codec cannot decode a stored value: {exc!r}") from exc


def check_match(codec: Codec, match: Any, *, what: str) -> None:
    """Refuse a SQL-side match that names a key the codec does not keep in clear."""
    clear = clear_keys(codec)
    if match is None:
        return
    if not isinstance(match, dict):
        raise ValidationError(
            f"{what}: with a codec, a match must be an object of clear keys "
            f"({sorted(clear) or 'the codec keeps none'}); the values themselves are encoded"
        )
    hidden = sorted(k for k in match if k not in clear)
    if hidden:
        raise ValidationError(
            f"{what}: {hidden} are encoded by the codec, so the database cannot match on "
            f"them; match only on the keys the codec keeps in clear ({sorted(clear)})"
        )


class FernetCodec:
    """Authenticated encryption of every stored value with keys the application holds.

    Args:
        keys: one Fernet key (url-safe base64 of 32 bytes: `FernetCodec.generate_key`)
            or several; the first encrypts, every one decrypts, so a key is rotated by
            putting the new one first and keeping the old ones until no value needs them.
        clear: top-level keys of object values also stored in clear (for ``match``).
            Each one is readable by anyone who can read the database.

    Needs ``pip install 'perdure[crypto]'``.
    """

    def __init__(self, keys: str | bytes | Iterable[str | bytes], *, clear: Collection[str] = ()):
        try:
            from cryptography.fernet import Fernet, MultiFernet
        except ImportError:  # pragma: no cover - the extra is installed in the tests
            raise MissingDependencyError("cryptography", "crypto") from None
        listed = [keys] if isinstance(keys, str | bytes) else list(keys)
        if not listed:
            raise ConfigurationError("FernetCodec needs at least one key")
        try:
            self._fernet = MultiFernet([Fernet(k) for k in listed])
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"not a Fernet key (url-safe base64 of 32 bytes): {exc}"
            ) from None
        if isinstance(clear, str):
            raise ConfigurationError("clear must be a collection of key names, not a string")
        self.clear = frozenset(clear)

    @staticmethod
    def generate_key() -> str:
        """A new random key; keep it out of the database (an environment variable, a
        secret manager)."""
        from cryptography.fernet import Fernet

        return Fernet.generate_key().decode("ascii")

    def encode(self, value: Any) -> str:
        plain = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return self._fernet.encrypt(plain.encode("utf-8")).decode("ascii")

    def decode(self, data: str) -> Any:
        from cryptography.fernet import InvalidToken

        try:
            plain = self._fernet.decrypt(data.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            raise CodecError(
                "a stored value could not be decrypted: a wrong key, or the data was altered"
            ) from None
        return json.loads(plain)

    def __repr__(self) -> str:
        return f"FernetCodec(clear={sorted(self.clear)})"  # never the keys
