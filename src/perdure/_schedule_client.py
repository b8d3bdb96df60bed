"""Cron schedules from the client: create or update, list, pause, resume, delete
(`perdure.App`'s methods, each with its sync twin). The ticks are fired by workers
(`perdure.maintenance`)."""

from __future__ import annotations

from typing import Any

from ._client import ClientBase
from .backends.base import Backend
from .errors import ValidationError
from .names import WorkflowRef, workflow_name
from .records import Schedule
from .schedules import (
    ScheduleSpec,
    check_catch_up,
    check_cron,
    check_schedule_name,
    check_timezone,
    next_tick,
)
from .serialization import encode
from .workflow import WorkflowDefinition

__all__ = ["ScheduleClient", "decorator_schedule", "store_schedule"]


def schedule_spec(
    name: object,
    workflow: WorkflowRef,
    cron: object,
    input: Any = None,
    timezone: object = "UTC",
    catch_up: object = "latest",
    *,
    max_bytes: int,
) -> ScheduleSpec:
    """A validated schedule; bad arguments raise `ValidationError` (nothing stored)."""
    if input is not None and not isinstance(input, dict):
        raise ValidationError(
            "a schedule's input must be a dict (each run gets it with scheduled_at added) or None"
        )
    return ScheduleSpec(
        name=check_schedule_name(name),
        workflow=workflow_name(workflow),
        cron=check_cron(cron),
        input_json=None
        if input is None
        else encode(input, what=f"the input of schedule {name!r}", max_bytes=max_bytes),
        timezone=check_timezone(timezone),
        catch_up=check_catch_up(catch_up),
    )


def decorator_schedule(definition: WorkflowDefinition) -> ScheduleSpec:
    """The schedule ``@app.workflow(schedule=...)`` declares: named after the workflow."""
    assert definition.schedule is not None
    return ScheduleSpec(
        name=definition.name,
        workflow=definition.name,
        cron=definition.schedule,
        input_json=None,
        timezone=definition.timezone,
        catch_up="latest",
    )


async def store_schedule(backend: Backend, spec: ScheduleSpec) -> Schedule:
    """Store a schedule whose first tick is the first after the database's now."""
    first = next_tick(spec.cron, spec.timezone, await backend.now())
    return await backend.put_schedule(spec, first)


class ScheduleClient(ClientBase):
    """The schedule methods of `perdure.App`."""

    async def schedule_async(
        self,
        name: str,
        workflow: WorkflowRef,
        cron: str,
        input: dict[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
    ) -> Schedule:
        """Create or update a cron schedule, stored in the database.

        Each tick starts one run of ``workflow`` (whatever the number of workers: the
        tick is the run's idempotency key) with ``input`` plus ``scheduled_at`` (the
        tick, ISO 8601 UTC). ``cron`` is read in the IANA ``timezone``: a tick in an
        hour that does not exist fires at the first valid instant after it, one in an
        hour that happens twice fires once. ``catch_up`` says what happens to ticks
        missed while no worker ran: ``"latest"`` fires the most recent, ``"all"`` every
        one, ``"none"`` none (a tick more than a minute late counts as missed).
        Updating a schedule keeps its next tick unless its cron, zone or workflow
        changed.
        """
        spec = schedule_spec(
            name,
            workflow,
            cron,
            input,
            timezone,
            catch_up,
            max_bytes=self.settings.max_payload_bytes,
        )
        return await store_schedule(await self._backend(), spec)

    def schedule(
        self,
        name: str,
        workflow: WorkflowRef,
        cron: str,
        input: dict[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
    ) -> Schedule:
        """Create or update a cron schedule; see `schedule_async`."""
        return self._portal.call(
            self.schedule_async, name, workflow, cron, input, timezone, catch_up
        )

    async def list_schedules_async(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await (await self._backend()).list_schedules()

    def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name; see `list_schedules_async`."""
        return self._portal.call(self.list_schedules_async)

    async def pause_schedule_async(self, name: str) -> bool:
        """Pause a schedule: its ticks are skipped until it is resumed. False if there
        is no such schedule."""
        return await (await self._backend()).pause_schedule(check_schedule_name(name), True, None)

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; see `pause_schedule_async`."""
        return self._portal.call(self.pause_schedule_async, name)

    async def resume_schedule_async(self, name: str) -> bool:
        """Resume a paused schedule from its next tick after now (the ticks that passed
        while it was paused are skipped). False if there is no such schedule."""
        backend = await self._backend()
        current = await backend.get_schedule(check_schedule_name(name))
        if current is None:
            return False
        following = next_tick(current.cron, current.timezone, await backend.now())
        return await backend.pause_schedule(name, False, following)

    def resume_schedule(self, name: str) -> bool:
        """Resume a paused schedule; see `resume_schedule_async`."""
        return self._portal.call(self.resume_schedule_async, name)

    async def delete_schedule_async(self, name: str) -> bool:
        """Delete a schedule (its runs stay). False if there was none."""
        return await (await self._backend()).delete_schedule(check_schedule_name(name))

    def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; see `delete_schedule_async`."""
        return self._portal.call(self.delete_schedule_async, name)
