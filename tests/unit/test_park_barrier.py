"""The park barrier never misses the change that makes a pass quiescent."""

import asyncio

import pytest

from perdure.engine.barrier import ParkBarrier
from perdure.engine.suspend import ParkSignal


@pytest.mark.parametrize("delay", range(12))
async def test_a_branch_that_starts_and_ends_work_while_the_barrier_settles_still_parks(
    delay: int,
) -> None:
    # A branch bumps the barrier (work begins and ends) `delay` loop turns after the
    # park request, which for some delays (3 to 6) falls inside the turns the barrier
    # waits to see the pass settled. Then nothing changes any more: the barrier must
    # still park. It used to miss that change and wait forever: a run stayed
    # `running`, its lease renewed, and never parked (seen in the chaos suite).
    barrier = ParkBarrier()
    poked = asyncio.Event()

    async def poke() -> None:
        for _ in range(delay):
            await asyncio.sleep(0)
        with barrier.working():
            pass
        poked.set()

    async def body() -> None:
        for _ in range(5):
            await asyncio.sleep(0)  # the barrier waits for a change by now
        request = barrier.request("sleep", None)
        branch = asyncio.get_running_loop().create_task(poke())
        try:
            await barrier.park(request)
        finally:
            await branch

    task = asyncio.get_running_loop().create_task(body())
    await asyncio.wait_for(barrier.drive(task), 10)
    assert poked.is_set()
    with pytest.raises(ParkSignal):
        task.result()
