"""The worker's record of the runs that ended in its passes: their "done" notices
do not wake its claim loop a second time (their end woke it already)."""

import asyncio

from perdure.engine.services import PassResult
from perdure.worker.active import ActiveRuns


class _Pass:
    def __init__(self, outcome: str) -> None:
        self.outcome = outcome

    async def execute(self) -> PassResult:
        return PassResult(self.outcome)

    def cancel(self, reason: str) -> None:
        raise AssertionError("not cancelled here")


async def _run(outcomes: dict[str, str]) -> tuple[ActiveRuns, int]:
    woken = 0
    all_ended = asyncio.Event()

    def on_end() -> None:
        nonlocal woken
        woken += 1
        if woken == len(outcomes):
            all_ended.set()

    active = ActiveRuns(on_end=on_end)
    for run_id, outcome in outcomes.items():
        active.start(run_id, _Pass(outcome))  # type: ignore[arg-type]
    await asyncio.wait_for(all_ended.wait(), 10)
    return active, woken


async def test_runs_that_ended_in_a_pass_here_are_remembered() -> None:
    active, woken = await _run(
        {"A": "completed", "B": "failed", "C": "cancelled", "D": "parked", "E": "abandoned"}
    )
    assert woken == 5  # every pass's end wakes the claim loop once
    assert [r for r in "ABCDE" if active.ended_here(r)] == ["A", "B", "C"]
    assert not active.ended_here("Z") and not active.ended_here(None)


async def test_only_the_latest_ends_are_kept() -> None:
    active, _ = await _run({f"R{i}": "completed" for i in range(5000)})
    assert not active.ended_here("R0") and active.ended_here("R4999")
    assert sum(active.ended_here(f"R{i}") for i in range(5000)) == 4096
