"""Signing in to the dashboard of a server with API tokens, and out again.

Signing in trades a token for a signed session (`..sessions`): the cookie never holds
the token, and the API never takes the cookie."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..sessions import COOKIE
from .forms import keep_session, notice_to, posted, session_of, sessions_of
from .pages import render

__all__ = ["LOGIN", "LOGOUT", "router"]

#: Where a dashboard visitor without a session is sent when tokens are set.
LOGIN = "/login"
#: Where the dashboard's "Sign out" button posts.
LOGOUT = "/logout"

router = APIRouter(include_in_schema=False)


@router.get(LOGIN, response_class=HTMLResponse)
async def login_page(request: Request, next: str = "/", failed: str = "") -> Response:
    """Ask for an API token once; the server then keeps a signed session in an
    HttpOnly, SameSite=Strict cookie. A server without tokens has no sign-in."""
    if getattr(request.app.state, "token_known", None) is None:
        return RedirectResponse(_local(next), 303)
    return render(request, "login.html", next=_local(next), failed=bool(failed))


@router.post(LOGIN)
async def login(request: Request) -> Response:
    """Open a signed-in session if the server knows the token."""
    form = await posted(request)
    if isinstance(form, Response):
        return form
    token, next = form.get("token", ""), form.get("next", "/")
    known = getattr(request.app.state, "token_known", None)
    if known is None or not token.isascii() or not known(token.encode()):
        return RedirectResponse(f"{LOGIN}?{urlencode({'next': next, 'failed': 1})}", 303)
    answer = RedirectResponse(_local(next), 303)
    keep_session(answer, request, sessions_of(request).open(token))  # a new id: no fixation
    return answer


@router.post(LOGOUT)
async def logout(request: Request) -> Response:
    """End the session: its cookie is cleared and this server refuses it from now on."""
    session, fresh = session_of(request)
    if not fresh:  # a live session: only its own pages may end it
        form = await posted(request)
        if isinstance(form, Response):
            return form
        sessions_of(request).sign_out(session)
    tokens = getattr(request.app.state, "token_known", None) is not None
    answer = notice_to(LOGIN if tokens else "/", "signed-out")
    answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return answer


def _local(path: str) -> str:
    """Only a path of this server (never another site) to go back to after login."""
    local = path.startswith("/") and not path.startswith("//") and "\\" not in path
    return path if local else "/"
