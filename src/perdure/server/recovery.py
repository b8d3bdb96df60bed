"""The routes that recover runs: retry, fork, and both kinds of bulk operations."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .common import ERRORS, app_of
from .models import BulkCancelIn, BulkOut, BulkRetryIn, ForkIn, RetryIn, RunIdOut
from .run import run_of_workflow

__all__ = ["router"]

router = APIRouter(prefix="/v1/workflows/{name}", tags=["recovery"])


def _by(request: Request) -> str:
    client = request.client
    return f"REST {client.host if client else 'client'}"


@router.post("/runs/{run_id}/retry", response_model=RunIdOut, responses=ERRORS)
async def retry_run(
    name: str, run_id: str, request: Request, body: RetryIn | None = None
) -> RunIdOut:
    """Resume a failed or cancelled run under its id from ``fromStep`` (default: the
    step that failed); the steps before it do not run again. 409 for a live run."""
    app = app_of(request)
    await run_of_workflow(name, run_id, request)
    from_step = None if body is None else body.from_step
    handle = await app.retry_async(run_id, from_step=from_step, by=_by(request))
    return RunIdOut(run_id=handle.id)


@router.post("/runs/{run_id}/fork", status_code=201, response_model=RunIdOut, responses=ERRORS)
async def fork_run(
    name: str, run_id: str, request: Request, body: ForkIn | None = None
) -> RunIdOut:
    """Start a new run from a copy of this run's journal before ``fromStep`` (default:
    all of it); the source is untouched."""
    app = app_of(request)
    await run_of_workflow(name, run_id, request)
    fork = body or ForkIn()
    handle = await app.fork_async(
        run_id, from_step=fork.from_step, input=fork.input, version=fork.version, by=_by(request)
    )
    return RunIdOut(run_id=handle.id)


@router.post("/bulk/retry", response_model=BulkOut, responses=ERRORS)
async def bulk_retry(name: str, request: Request, body: BulkRetryIn | None = None) -> BulkOut:
    """Retry every run of the workflow the filters select (``status``: failed, the
    default, or cancelled; any other is refused with 422), each in its own transaction."""
    select = body or BulkRetryIn()
    ids = await app_of(request).retry_runs_async(
        name,
        status=select.status,
        since=select.since,
        until=select.until,
        input_match=select.input,
        by=_by(request),
    )
    return BulkOut(run_ids=ids)


@router.post("/bulk/cancel", response_model=BulkOut, responses=ERRORS)
async def bulk_cancel(name: str, request: Request, body: BulkCancelIn | None = None) -> BulkOut:
    """Cancel every live run of the workflow the filters select (``status``: pending,
    running or waiting, default all three; any other is refused with 422)."""
    select = body or BulkCancelIn()
    ids = await app_of(request).cancel_runs_async(
        name, status=select.status, since=select.since, until=select.until,
        input_match=select.input,
    )  # fmt: skip
    return BulkOut(run_ids=ids)
