import asyncio

from perdure._run_ends import RunEnd, run_ends


async def test_a_worker_hands_the_outcome_to_waiters_of_its_process() -> None:
    got: list[RunEnd] = []
    stop = run_ends.listen("RUN1", got.append)
    run_ends.publish("RUN1", "completed", '{"x":1}', None)
    run_ends.publish("RUN1", "completed", '{"x":2}', None)  # nobody listens any more
    await asyncio.sleep(0)
    assert got == [("completed", {"x": 1}, None)]
    stop()  # stopping after delivery is harmless


async def test_stopped_listeners_hear_nothing() -> None:
    got: list[RunEnd] = []
    stop = run_ends.listen("RUN2", got.append)
    stop()
    run_ends.publish("RUN2", "failed", None, {"type": "X"})
    await asyncio.sleep(0)
    assert got == []
