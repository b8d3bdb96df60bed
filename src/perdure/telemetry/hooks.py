"""The hooks protocol the engine and the worker call at the moments telemetry cares
about, and its no-op default.

The engine never imports Prometheus or OpenTelemetry: it calls these hooks, and a
process that wants metrics or spans installs an implementation (`perdure.telemetry.
live`). The default does nothing and allocates nothing, so a worker without
telemetry pays one method call per hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from datetime import datetime

    from ..records import Claim

__all__ = ["NOOP", "NOOP_PASS", "PassHooks", "TelemetryHooks"]


class PassHooks(Protocol):
    """The hooks of one execution pass of one claimed run."""

    def step_began(self, key: str, kind: str, attempt: int) -> object:
        """A step attempt starts executing; returns a handle for `step_ended`."""

    def step_ended(self, handle: object, error: BaseException | None) -> None:
        """The attempt `step_began` announced ended (``error``: why it failed)."""

    def step_retried(self, key: str) -> None:
        """A failed attempt of step ``key`` will be retried."""

    def waited(self, key: str, kind: str, started: datetime, ended: datetime) -> None:
        """A sleep or wait (``kind``) that parked the run from ``started`` woke at
        ``ended`` (database times)."""

    def diverged(self) -> None:
        """The pass's replay diverged from the run's journal."""

    def pass_ended(self, outcome: str, committed_ns: int | None = None) -> None:
        """The pass ended with ``outcome`` (a `PassResult` outcome); ``committed_ns`` is
        when its last commit returned (`time.time_ns`), if it made one."""

    def traceparent(self) -> str | None:
        """The W3C traceparent of the pass's span (a child run's spans join it)."""


class TelemetryHooks(Protocol):
    """What a process counts and traces."""

    def pass_began(self, claim: Claim) -> PassHooks:
        """A worker starts a pass over a claimed run (its first claim starts the run)."""

    def swept(self, removed: int) -> None:
        """The retention sweeper deleted ``removed`` finished runs."""


class _NoPass:
    __slots__ = ()

    def step_began(self, key: str, kind: str, attempt: int) -> object:
        return None

    def step_ended(self, handle: object, error: BaseException | None) -> None:
        pass

    def step_retried(self, key: str) -> None:
        pass

    def waited(self, key: str, kind: str, started: datetime, ended: datetime) -> None:
        pass

    def diverged(self) -> None:
        pass

    def pass_ended(self, outcome: str, committed_ns: int | None = None) -> None:
        pass

    def traceparent(self) -> str | None:
        return None


class _NoTelemetry:
    __slots__ = ()

    def pass_began(self, claim: Claim) -> PassHooks:
        return NOOP_PASS

    def swept(self, removed: int) -> None:
        pass


#: The hooks of a pass that nobody observes.
NOOP_PASS: PassHooks = _NoPass()
#: The default: count nothing, trace nothing.
NOOP: TelemetryHooks = _NoTelemetry()
