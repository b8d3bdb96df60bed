"""Steps that read like Python (DESIGN §4): arguments, typed results rebuilt on first
run and replay, typed workflow input, and perdure.current_step()."""

from __future__ import annotations

from dataclasses import dataclass

import pydantic
import pytest

import perdure
from perdure import App, Context, PerdureError, StepInfo


@dataclass
class Invoice:
    order: int
    total: float


class Customer(pydantic.BaseModel):
    name: str
    vip: bool = False


@dataclass
class Order:
    id: int
    customer: str


def test_steps_take_arguments_and_rebuild_typed_results_on_first_run_and_replay(
    app: App,
) -> None:
    seen: list[tuple[str, object]] = []

    def make_invoice(order: int, *, total: float) -> Invoice:
        info = perdure.current_step()
        seen.append((info.idempotency_key, info.attempt))
        return Invoice(order, total)

    async def fetch_customer(name: str) -> Customer:
        return Customer(name=name, vip=True)

    @app.workflow
    async def bill(ctx: Context, order: Order) -> str:
        assert isinstance(order, Order)  # typed input
        invoice = await ctx.step.run("invoice", make_invoice, order.id, total=9.5)
        assert isinstance(invoice, Invoice)
        await ctx.step.sleep("pause", "10ms")  # parks: the next pass replays "invoice"
        again = await ctx.step.run("invoice-again", make_invoice, order.id, total=1.0)
        customer = await ctx.step.run("customer", fetch_customer, order.customer)
        assert isinstance(customer, Customer)
        return f"{invoice.order} {invoice.total} {again.total} {customer.name} {customer.vip}"

    with app.worker():
        handle = app.start(bill, Order(7, "ada"))
        assert handle.result(timeout=30) == "7 9.5 1.0 ada True"
    assert seen == [(f"{handle.id}:invoice", 1), (f"{handle.id}:invoice-again", 1)]


def test_current_step_outside_a_step_is_a_clear_error() -> None:
    with pytest.raises(PerdureError, match="only available inside a step"):
        perdure.current_step()
    assert StepInfo("r", "k", 2).idempotency_key == "r:k"


def test_ctx_log_writes_once_per_real_execution_and_tags_the_record(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.workflow
    async def chatty(ctx: Context, _: object) -> None:
        ctx.log.info("starting")
        await ctx.step.run("one", lambda: 1)
        ctx.log.info("after one")
        await ctx.step.sleep("nap", "10ms")  # parks: the next pass replays the lines above
        ctx.log.info("after nap")

    caplog.set_level("INFO", logger="perdure.workflow")
    with app.worker():
        handle = app.start(chatty)
        handle.result(timeout=30)
    lines = [r for r in caplog.records if r.name == "perdure.workflow"]
    assert [r.getMessage().split("] ", 1)[1] for r in lines] == [
        "starting",
        "after one",
        "after nap",
    ]
    last = lines[-1]
    assert (last.run_id, last.workflow, last.step) == (handle.id, "chatty", "nap")  # type: ignore[attr-defined]
