"""The dashboard's session: a signed cookie, never the API token, and the CSRF token
every dashboard form carries.

The cookie ``perdure_session`` holds ``<id>.<expires>.<who>.<signature>``: a random
session id, the Unix time after which it is refused, whom it signs in (a fingerprint
of the API token it was opened with, or ``-`` for a session that signs no one in) and
an HMAC-SHA256 of the rest under the server's secret. A session of a token that is no
longer set is refused, and so is a session signed out here. The CSRF token of a
session is another HMAC of its id, so nothing is stored on the server."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigurationError

__all__ = ["COOKIE", "DEFAULT_LIFETIME", "Session", "Sessions", "load_secret"]

#: The cookie's name.
COOKIE = "perdure_session"
#: How long a session lasts, in seconds, unless ``perdure serve --session-lifetime``.
DEFAULT_LIFETIME = 12 * 3600.0
_NOBODY = "-"


def load_secret(value: str | None = None) -> bytes | None:
    """The secret sessions are signed with: ``PERDURE_SESSION_SECRET`` (or ``value``),
    at least 32 characters; None for a random one per process."""
    raw = os.environ.get("PERDURE_SESSION_SECRET", "") if value is None else value
    if not raw:
        return None
    if len(raw) < 32:
        raise ConfigurationError("PERDURE_SESSION_SECRET must be at least 32 characters long")
    return raw.encode()


@dataclass(frozen=True)
class Session:
    """One signed session: its id, when it expires, and whom it signs in."""

    id: str
    expires: int
    who: str

    @property
    def signed_in(self) -> bool:
        """True if it was opened with an API token."""
        return self.who != _NOBODY


class Sessions:
    """Opens, reads and signs out sessions under one secret (random unless given)."""

    def __init__(
        self,
        tokens: tuple[str, ...] = (),
        *,
        secret: bytes | None = None,
        lifetime: float = DEFAULT_LIFETIME,
        now: Callable[[], float] = time.time,
    ) -> None:
        if not lifetime > 0:
            raise ConfigurationError(f"a session lifetime must be positive, got {lifetime}")
        self._secret = secret or secrets.token_bytes(32)
        self.lifetime = lifetime
        self._now = now
        self._who = tuple(self._fingerprint(t) for t in tokens)
        self._signed_out: dict[str, int] = {}

    def open(self, token: str | None = None) -> Session:
        """A new session, signing in the holder of ``token`` (a known one) if given."""
        who = _NOBODY if token is None else self._fingerprint(token)
        expires = int(self._now() + self.lifetime)
        return Session(secrets.token_hex(16), expires, who)

    def read(self, value: str) -> Session | None:
        """The session of a cookie's value; None if it is forged, expired, signed out, or
        signs in a token that is no longer set."""
        parts = value.split(".")
        if not value.isascii() or len(parts) != 4 or not parts[1].isdigit():
            return None
        sid, expires, who, signature = parts
        if not hmac.compare_digest(signature, self._sign(sid, expires, who)):
            return None
        if int(expires) <= self._now() or sid in self._signed_out:
            return None
        if who != _NOBODY and not any(hmac.compare_digest(who, w) for w in self._who):
            return None
        return Session(sid, int(expires), who)

    def from_header(self, cookie_header: str) -> Session | None:
        """The session in a ``Cookie`` header, if a valid one is there."""
        for part in cookie_header.split(";"):
            key, _, value = part.strip().partition("=")
            if key == COOKIE:
                return self.read(value)
        return None

    def value(self, session: Session) -> str:
        """The cookie's value for ``session``."""
        expires = str(session.expires)
        signature = self._sign(session.id, expires, session.who)
        return f"{session.id}.{expires}.{session.who}.{signature}"

    def csrf(self, session: Session) -> str:
        """The CSRF token of ``session``'s forms."""
        return self._mac("csrf", session.id)[:32]

    def csrf_ok(self, session: Session | None, given: str) -> bool:
        """True if ``given`` is the CSRF token of ``session``."""
        if session is None or not given.isascii():
            return False
        return hmac.compare_digest(self.csrf(session), given)

    def sign_out(self, session: Session) -> None:
        """Refuse ``session`` from now on in this process (its cookie is cleared too)."""
        now = self._now()
        self._signed_out = {s: e for s, e in self._signed_out.items() if e > now}
        self._signed_out[session.id] = session.expires

    def _fingerprint(self, token: str) -> str:
        return self._mac("who", token)[:24]

    def _sign(self, sid: str, expires: str, who: str) -> str:
        return self._mac("session", f"{sid}.{expires}.{who}")

    def _mac(self, purpose: str, text: str) -> str:
        message = f"{purpose}\n{text}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()
