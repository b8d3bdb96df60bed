"""The dashboard at ``/``: server-rendered pages, no build step, nothing loaded from
outside the server."""

from fastapi import APIRouter

from . import actions, pages, signin
from .forms import SECURITY_HEADERS
from .pages import STATIC
from .signin import LOGIN, LOGOUT

__all__ = ["LOGIN", "LOGOUT", "SECURITY_HEADERS", "STATIC", "router"]

router = APIRouter(include_in_schema=False)
router.include_router(pages.router)
router.include_router(actions.router)
router.include_router(signin.router)
