"""Every error the API answers has one shape, ``{"error": {"type", "message"}}``, and a
4xx status for bad input; only a database outage answers 5xx (503)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import (
    BackendError,
    ConfigurationError,
    NotFoundError,
    PerdureError,
    ReadOnlyDatabase,
    RunNotFound,
    RunStateError,
    SchemaVersionError,
    ValidationError,
)
from .wire_names import rest_names

log = logging.getLogger("perdure.server")

__all__ = ["error_response", "install_error_handlers"]

#: The statuses perdure's own errors answer with.
_STATUS: tuple[tuple[type[PerdureError], int], ...] = (
    (RunNotFound, 404),
    (NotFoundError, 404),
    (RunStateError, 409),
    (ReadOnlyDatabase, 403),
    (ValidationError, 422),
    (ConfigurationError, 422),
    (SchemaVersionError, 503),
    (BackendError, 503),
)

#: What each status means when HTTP itself raised it (unknown route, wrong method...).
_HTTP_TYPES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    422: "ValidationError",
}


def error_response(status: int, type_: str, message: str, **headers: str) -> JSONResponse:
    """The one shape of an error answer."""
    return JSONResponse(
        {"error": {"type": type_, "message": message}}, status_code=status, headers=headers
    )


async def _perdure_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PerdureError)
    status = next((s for kind, s in _STATUS if isinstance(exc, kind)), 500)
    if status >= 500:
        log.warning("database unavailable: %s", exc)
        return error_response(status, "Unavailable", f"the database is unavailable: {exc}")
    type_ = "ReadOnly" if isinstance(exc, ReadOnlyDatabase) else type(exc).__name__
    message = str(exc)
    if request.url.path.startswith("/v1/"):  # the API's callers know its names only
        message = rest_names(message)
    return error_response(status, type_, message)


async def _request_invalid(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, "ValidationError", _describe(exc.errors()))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    status = exc.status_code
    message = str(exc.detail)
    if status == 400 and message.startswith("There was an error parsing the body"):
        status, message = 422, "the request body is not JSON perdure can read (or too deep)"
    elif status == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path}"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    return error_response(status, _HTTP_TYPES.get(status, "Error"), message, **headers)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("internal error answering a request")
    return error_response(500, "InternalError", "an internal error occurred; see the server log")


def install_error_handlers(api: FastAPI) -> None:
    """Map every error to the API's error shape."""
    api.add_exception_handler(PerdureError, _perdure_error)
    api.add_exception_handler(RequestValidationError, _request_invalid)
    api.add_exception_handler(HTTPException, _http_error)
    api.add_exception_handler(Exception, _unexpected)


def _describe(errors: Any) -> str:
    """pydantic's error list in words: ``body.input: field required; ...``."""
    parts = []
    for error in list(errors)[:5]:
        if error.get("type") == "json_invalid":
            return "the request body is not valid JSON"
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "the request is invalid"
