"""What the route modules share: the app behind the server, page parameters, and the
error answers every route documents."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request

from ..app import App
from .models import ErrorBody

__all__ = ["ERRORS", "Cursor", "Limit", "app_of"]

#: The error answers every route may give (each also in the OpenAPI document).
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "The Host header is not one this server answers to."),
        (401, "A bearer token is required or wrong."),
        (404, "No such run (of this workflow)."),
        (409, "The run's status does not allow this (retrying a live run)."),
        (413, "The request body is over 1 MiB."),
        (415, "A POST, PUT or PATCH without a JSON body (Content-Type: application/json)."),
        (422, "The request is invalid; nothing was stored."),
        (503, "The database is unavailable."),
    )
}

Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
Cursor = Annotated[
    str | None, Query(max_length=1000, description="The nextCursor of the previous page.")
]


def app_of(request: Request) -> App:
    """The perdure App this server answers for."""
    app: App = request.app.state.perdure
    return app
