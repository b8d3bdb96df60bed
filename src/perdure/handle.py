"""RunHandle: a reference to one run, returned by `App.start`."""

from __future__ import annotations

from typing import Any, Protocol

from .records import Run

__all__ = ["RunClient", "RunHandle"]


class RunClient(Protocol):
    """The calls a handle forwards (`perdure.App` implements them)."""

    async def result_async(self, run_id: str, timeout: float | None = None) -> Any: ...
    def result(self, run_id: str, timeout: float | None = None) -> Any: ...
    async def get_run_async(self, run_id: str) -> Run: ...
    def get_run(self, run_id: str) -> Run: ...
    async def cancel_async(self, run_id: str, *, rollback: bool = False) -> bool: ...
    def cancel(self, run_id: str, *, rollback: bool = False) -> bool: ...
    async def signal_async(
        self, run_id: str, event: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> bool: ...
    def signal(
        self, run_id: str, event: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> bool: ...


class RunHandle:
    """A started run: its ``id`` and shortcuts to the app's methods for it.

    ``created`` is False when the start found an existing run (same idempotency key
    or run id); ``warning`` says when no process has registered the workflow yet (the
    run waits for a worker that serves it)."""

    __slots__ = ("_app", "created", "id", "warning", "workflow")

    def __init__(
        self,
        app: RunClient,
        run_id: str,
        workflow: str,
        *,
        created: bool = True,
        warning: str | None = None,
    ) -> None:
        self._app = app
        self.id = run_id
        self.workflow = workflow
        self.created = created
        self.warning = warning

    def __repr__(self) -> str:
        return f"<RunHandle {self.workflow} {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Wait for the output; see `App.result_async`."""
        return await self._app.result_async(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the output; see `App.result`."""
        return self._app.result(self.id, timeout)

    async def get_async(self) -> Run:
        """The run's current record."""
        return await self._app.get_run_async(self.id)

    def get(self) -> Run:
        """The run's current record."""
        return self._app.get_run(self.id)

    async def cancel_async(self, *, rollback: bool = False) -> bool:
        """Cancel the run; see `App.cancel_async`."""
        return await self._app.cancel_async(self.id, rollback=rollback)

    def cancel(self, *, rollback: bool = False) -> bool:
        """Cancel the run; see `App.cancel`."""
        return self._app.cancel(self.id, rollback=rollback)

    async def signal_async(
        self, event: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> bool:
        """Send an event to the run; see `App.signal_async`."""
        return await self._app.signal_async(
            self.id, event, payload, idempotency_key=idempotency_key
        )

    def signal(
        self, event: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> bool:
        """Send an event to the run; see `App.signal`."""
        return self._app.signal(self.id, event, payload, idempotency_key=idempotency_key)
