"""A stopping worker ends its background tasks even when a cancellation is lost."""

import asyncio

from perdure._tasks import cancel_and_wait


async def test_a_task_that_lost_a_cancellation_is_cancelled_again() -> None:
    lost = 0

    async def loop_forever() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # as a cancellation lost below the task would be

    task = asyncio.create_task(loop_forever())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait([task], every=0.05), 10)
    assert task.cancelled() and lost == 1


async def test_tasks_that_already_ended_or_failed_are_fine() -> None:
    async def fail() -> None:
        raise ValueError("gone")

    failed = asyncio.create_task(fail())
    await asyncio.sleep(0)
    await cancel_and_wait([failed])  # its exception is retrieved, nothing raised
    assert failed.done() and isinstance(failed.exception(), ValueError)
