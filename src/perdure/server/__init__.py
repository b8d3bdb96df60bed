"""The server (``perdure serve``): the REST API and the dashboard, over an `App`'s async
methods, so every check a Python caller meets applies to HTTP callers too. See
docs/api.md and docs/dashboard.md."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .._tasks import cancel_and_wait
from .._version import __version__
from ..app import App
from ..maintenance import sweep_forever
from ..telemetry.live import enable_metrics
from . import dashboard
from .errors import install_error_handlers
from .flows import router as flows_router
from .guards import BodyLimit, TokenCheck, check_bind, load_tokens
from .metrics import router as metrics_router
from .others import router as others_router
from .readonly import ReadOnlyGuard
from .recovery import router as recovery_router
from .redacting import Redacting
from .runs import router as runs_router
from .schedules import router as schedules_router

__all__ = ["create_server", "serve"]

log = logging.getLogger("perdure.server")


def create_server(app: App, *, tokens: tuple[str, ...] = ()) -> FastAPI:
    """The ASGI application of the REST API for ``app``. With ``tokens``, every request
    but ``/healthz`` and ``/openapi.json`` needs one as a bearer token. An app opened
    read-only (``read_only=True``) gets a read-only server: changes answer 403 and
    the retention sweeper does not run."""

    enable_metrics()  # the server counts what it does (signals, sweeps) for /metrics
    read_only = app.settings.read_only

    @asynccontextmanager
    async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
        # The retention sweeper runs in the server too, so a deployment whose workers
        # come and go still deletes expired runs.
        interval = 0.0 if read_only else app.settings.sweep_interval  # a sweep writes
        sweeper = asyncio.create_task(
            sweep_forever(app.sweep_async, interval), name="perdure-sweeper"
        )
        try:
            yield
        finally:
            await cancel_and_wait([sweeper])
            await app.close_async()

    api = FastAPI(
        title="perdure",
        version=__version__,
        summary="Durable workflows on PostgreSQL or SQLite: start, watch and steer runs.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    api.state.perdure = app
    install_error_handlers(api)
    api.include_router(runs_router)
    api.include_router(others_router)
    api.include_router(flows_router)
    api.include_router(recovery_router)
    api.include_router(schedules_router)
    api.include_router(metrics_router)
    api.include_router(dashboard.router)
    api.mount("/static", StaticFiles(directory=dashboard.STATIC), name="static")
    api.state.token_check = TokenCheck(api, tokens).known if tokens else None
    if read_only:
        api.add_middleware(ReadOnlyGuard)  # inside the token check: 401 comes first
    api.add_middleware(TokenCheck, tokens=tokens)
    api.add_middleware(BodyLimit)
    if app.redaction:
        api.add_middleware(Redacting, redaction=app.redaction)
    return api


def serve(
    app: App, *, host: str = "127.0.0.1", port: int = 8000, tokens: str | None = None
) -> None:
    """Run the REST API in the foreground until SIGTERM/SIGINT. Without tokens (none
    given and no ``PERDURE_API_TOKENS``) it listens on loopback only."""
    import uvicorn

    keys = load_tokens(tokens)
    check_bind(host, keys)
    log.info("serving the perdure API on http://%s:%d", host, port)
    uvicorn.run(create_server(app, tokens=keys), host=host, port=port, log_level="warning")
