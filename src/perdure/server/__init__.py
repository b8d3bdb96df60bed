"""The server (``perdure serve``): the REST API and the dashboard, over an `App`'s async
methods, so every check a Python caller meets applies to HTTP callers too. See
docs/api.md and docs/dashboard.md."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
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
from .guards import BodyLimit, TokenCheck, check_bind, load_tokens, token_known
from .metrics import router as metrics_router
from .origin import HostCheck, JsonOnly
from .origin import allowed_hosts as _allowed
from .others import router as others_router
from .readonly import ReadOnlyGuard
from .recovery import router as recovery_router
from .redacting import Redacting
from .runs import by_id as run_by_id_router
from .runs import router as runs_router
from .schedules import router as schedules_router
from .sessions import DEFAULT_LIFETIME, Sessions, load_secret
from .slowclients import DEFAULT_HEAD_TIMEOUT, head_timeout_protocol

__all__ = ["create_server", "serve"]

log = logging.getLogger("perdure.server")


def create_server(
    app: App,
    *,
    tokens: tuple[str, ...] = (),
    hosts: frozenset[str] | None = None,
    session_lifetime: float = DEFAULT_LIFETIME,
    session_secret: bytes | None = None,
) -> FastAPI:
    """The ASGI application of the REST API and the dashboard for ``app``.

    With ``tokens``, every request but ``/healthz`` and ``/openapi.json`` needs one: as
    a bearer token for the API, or a dashboard session signed in with one. It answers
    only to the Host names in ``hosts`` (default: loopback names, see
    `origin.allowed_hosts`). Dashboard sessions last ``session_lifetime`` seconds and
    are signed with ``session_secret`` (random unless given). An app opened read-only
    (``read_only=True``) gets a read-only server: changes answer 403 and the retention
    sweeper does not run."""

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
    api.include_router(run_by_id_router)
    api.include_router(others_router)
    api.include_router(flows_router)
    api.include_router(recovery_router)
    api.include_router(schedules_router)
    api.include_router(metrics_router)
    api.include_router(dashboard.router)
    api.mount("/static", StaticFiles(directory=dashboard.STATIC), name="static")
    sessions = Sessions(tokens, secret=session_secret, lifetime=session_lifetime)
    known = tuple(t.encode() for t in tokens)
    api.state.sessions = sessions
    api.state.token_known = (lambda given: token_known(known, given)) if tokens else None
    # the first added runs last: Host, then credentials, then the body's size and type
    if read_only:
        api.add_middleware(ReadOnlyGuard)  # inside the token check: 401 comes first
    if app.redaction:
        api.add_middleware(Redacting, redaction=app.redaction)
    api.add_middleware(JsonOnly)
    api.add_middleware(BodyLimit)
    api.add_middleware(TokenCheck, tokens=tokens, sessions=sessions)
    api.add_middleware(HostCheck, hosts=_allowed() if hosts is None else hosts)
    return api


def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: str | None = None,
    allowed_hosts: Sequence[str] = (),
    session_lifetime: float = DEFAULT_LIFETIME,
    header_timeout: float = DEFAULT_HEAD_TIMEOUT,
) -> None:
    """Run the REST API and the dashboard in the foreground until SIGTERM/SIGINT.

    Without tokens (none given and no ``PERDURE_API_TOKENS``) it listens on loopback
    only. It answers to loopback Host names, the address it listens on, and
    ``allowed_hosts`` (plus ``PERDURE_ALLOWED_HOSTS``). A client has
    ``header_timeout`` seconds to send each request's headers. Sessions are signed
    with ``PERDURE_SESSION_SECRET`` if set (the same in every server behind one
    address), else a random secret of this process."""
    import uvicorn

    keys = load_tokens(tokens)
    check_bind(host, keys)
    server = create_server(
        app,
        tokens=keys,
        hosts=_allowed(allowed_hosts, bind=host),
        session_lifetime=session_lifetime,
        session_secret=load_secret(),
    )
    protocol = head_timeout_protocol(header_timeout)
    log.info("serving the perdure API on http://%s:%d", host, port)
    uvicorn.run(server, host=host, port=port, log_level="warning", http=protocol)
