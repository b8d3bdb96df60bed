"""The dashboard at ``/``: server-rendered pages, no build step, nothing loaded from
outside the server."""

from .pages import LOGIN, SECURITY_HEADERS, STATIC, router

__all__ = ["LOGIN", "SECURITY_HEADERS", "STATIC", "router"]
