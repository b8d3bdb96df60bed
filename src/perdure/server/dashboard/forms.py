"""What every dashboard form passes: it comes from a page of this server (its Origin),
it carries the CSRF token of the visitor's session, and it has few fields. Also the
fixed notices an action leads to: a page shows a notice by its code, never text from
the address."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..origin import same_origin
from ..sessions import COOKIE, Session, Sessions

__all__ = [
    "MAX_FIELDS",
    "NOTICES",
    "SECURITY_HEADERS",
    "Notice",
    "keep_session",
    "notice_to",
    "posted",
    "session_of",
    "sessions_of",
]

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: A form with more fields than this answers 400.
MAX_FIELDS = 20


@dataclass(frozen=True, slots=True)
class Notice:
    """A fixed notice: its text, and whether it says something went wrong (then it is
    shown as an error)."""

    text: str
    error: bool = False


#: The notices a page shows after an action, by the code in its ``?notice=``.
NOTICES = {
    "cancelled": Notice("Cancelled."),
    "cancelling": Notice("Cancelling after its rollbacks."),
    "already-ended": Notice("Not cancelled: the run had already ended.", error=True),
    "signal-sent": Notice("Signal sent."),
    "signal-late": Notice("Not sent: the run has ended.", error=True),
    "retried": Notice("Retried."),
    "forked": Notice("Forked: this is the new run."),
    "schedule-paused": Notice("Schedule paused."),
    "schedule-resumed": Notice("Schedule resumed."),
    "schedule-deleted": Notice("Schedule deleted."),
    "signed-out": Notice("Signed out."),
}


def sessions_of(request: Request) -> Sessions:
    """The server's sessions."""
    sessions: Sessions = request.app.state.sessions
    return sessions


def session_of(request: Request) -> tuple[Session, bool]:
    """The visitor's session, and whether it is new (then `keep_session` must send its
    cookie): every visitor has one, for the CSRF token of its forms."""
    sessions = sessions_of(request)
    session = sessions.from_header(request.headers.get("cookie", ""))
    return (session, False) if session is not None else (sessions.open(), True)


def keep_session(response: Response, request: Request, session: Session) -> None:
    """Send ``session``'s cookie: HttpOnly, SameSite=Strict, for the whole server."""
    sessions = sessions_of(request)
    response.set_cookie(
        COOKIE,
        sessions.value(session),
        max_age=int(sessions.lifetime),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def notice_to(path: str, code: str) -> RedirectResponse:
    """Go to ``path`` (after a POST), which then shows the notice ``code``."""
    assert code in NOTICES, code
    return RedirectResponse(f"{path}?{urlencode({'notice': code})}", status_code=303)


async def posted(request: Request) -> dict[str, str] | Response:
    """The fields of a form posted from a page of this server with the session's CSRF
    token (``application/x-www-form-urlencoded``), or the refusal: 403 from elsewhere
    or without the token, 400 for too many fields."""
    if not same_origin(request):
        return _refuse(403, "actions must come from the dashboard's own pages")
    try:
        fields = parse_qs(
            (await request.body()).decode("utf-8", "replace"), max_num_fields=MAX_FIELDS
        )
    except ValueError:
        return _refuse(400, f"a form has at most {MAX_FIELDS} fields")
    form = {key: values[-1] for key, values in fields.items()}
    session = sessions_of(request).from_header(request.headers.get("cookie", ""))
    if not sessions_of(request).csrf_ok(session, form.get("csrf", "")):
        return _refuse(403, "the form is stale or not from this dashboard: reload the page")
    return form


def _refuse(status: int, message: str) -> HTMLResponse:
    return HTMLResponse(message, status, headers=SECURITY_HEADERS)
