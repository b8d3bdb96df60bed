"""The payload codec (DESIGN §12): with ``App(codec=FernetCodec(key))`` no input, output,
step result, payload or value reaches the database in clear, and every API returns the
decoded values — on each backend."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from perdure import App, Context, WorkflowFailed
from perdure.codec import ENVELOPE, FernetCodec
from perdure.errors import ConfigurationError, ValidationError
from perdure.serialization import Undecodable

from .helpers import wait_for

KEY = FernetCodec.generate_key()
SECRETS = {
    "input": "s3cret-input-7f1",
    "step": "s3cret-step-2a9",
    "value": "s3cret-value-c44",
    "signal": "s3cret-signal-91b",
    "event": "s3cret-event-0d3",
    "buffered": "s3cret-buffered-e17",
    "child": "s3cret-child-5c2",
    "output": "s3cret-output-b80",
}


def raw_rows(database: Any) -> str:
    """Every row of every table of the test's database, as one text."""
    if database.kind == "sqlite":
        conn = sqlite3.connect(database.path)
        try:
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = [r[0] for r in listed]
            return "\n".join(
                repr(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"')
            )
        finally:
            conn.close()
    import psycopg
    from psycopg import sql

    with psycopg.connect(database.url, autocommit=True) as pg:
        tables = [
            r[0]
            for r in pg.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (database.schema,)
            )
        ]
        return "\n".join(
            str(row[0])
            for t in tables
            for row in pg.execute(
                sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                    sql.Identifier(database.schema), sql.Identifier(t)
                )
            )
        )


@pytest.fixture
def app(database) -> Iterator[App]:  # type: ignore[no-untyped-def]
    app = App(
        database.url,
        schema=database.schema,
        sweep_interval=0,
        codec=FernetCodec(KEY, clear=["order"]),
    )
    yield app
    app.close()


def _register(app: App) -> None:
    @app.workflow
    async def child(ctx: Context, secret: str) -> str:
        return await ctx.step.run("echo", lambda: secret.upper())

    @app.workflow
    async def secretive(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
        step = await ctx.step.run("step", lambda: SECRETS["step"])
        await ctx.set("card", SECRETS["value"])
        signal = await ctx.step.wait_for_event("signal")
        event = await ctx.step.wait_for_event("paid", match={"order": input["order"]})
        child_out = await ctx.step.run_workflow("child", child, SECRETS["child"])
        return {
            "step": step,
            "signal": signal,
            "event": event,
            "child": child_out,
            "output": SECRETS["output"],
        }


def test_no_plaintext_at_rest_and_the_api_decodes(app: App, database) -> None:  # type: ignore[no-untyped-def]
    _register(app)
    with app.worker():
        handle = app.start("secretive", {"order": "o-1", "secret": SECRETS["input"]})
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 30)
        assert handle.signal("later", SECRETS["buffered"])  # buffered, never taken
        assert handle.signal("signal", {"s": SECRETS["signal"]})
        wait_for(  # parked a second time: on "paid"
            lambda: (
                sum(e.type == "waiting" for e in app.get_events(handle.id)) == 2
                and app.get_run(handle.id).status == "waiting"
            ),
            30,
        )
        published = app.publish("paid", {"order": "o-1", "s": SECRETS["event"]})
        assert published.resumed == (handle.id,)
        output = handle.result(timeout=30)
    assert output == {
        "step": SECRETS["step"],
        "signal": {"s": SECRETS["signal"]},
        "event": {"order": "o-1", "s": SECRETS["event"]},
        "child": SECRETS["child"].upper(),
        "output": SECRETS["output"],
    }
    text = raw_rows(database)
    assert ENVELOPE in text  # values are stored, sealed
    leaked = [name for name, secret in SECRETS.items() if secret in text or secret.upper() in text]
    assert leaked == []
    assert "o-1" in text  # the key the codec keeps in clear, for matching
    # Every read decodes.
    run = app.get_run(handle.id)
    assert run.input == {"order": "o-1", "secret": SECRETS["input"]} and run.output == output
    steps = {s.name: s.output for s in app.get_steps(handle.id)}
    assert steps["step"] == SECRETS["step"]
    assert steps["signal"] == {"s": SECRETS["signal"]}
    assert app.get_values(handle.id) == {"card": SECRETS["value"]}
    values = [e.data for e in app.get_events(handle.id) if e.type == "value"]
    assert values == [{"key": "card", "value": SECRETS["value"]}]
    assert [r.id for r in app.list_runs("secretive", input_match={"order": "o-1"}).items] == [
        handle.id
    ]


def test_a_schedule_input_is_sealed_at_rest_and_read_decoded(app: App, database) -> None:  # type: ignore[no-untyped-def]
    _register(app)
    app.schedule("nightly", "secretive", "0 3 * * *", input={"secret": "schedule-secret-7"})
    assert "schedule-secret-7" not in raw_rows(database)
    assert [s.input for s in app.list_schedules()] == [{"secret": "schedule-secret-7"}]


def test_a_match_on_an_encoded_key_is_refused(app: App) -> None:
    with pytest.raises(ValidationError, match="encoded"):
        app.list_runs(input_match={"secret": "x"})

    @app.workflow
    async def hidden(ctx: Context, _: None) -> Any:
        return await ctx.step.wait_for_event("e", match={"secret": "x"})

    with app.worker(), pytest.raises(WorkflowFailed) as failed:
        app.run(hidden, timeout=30)
    assert failed.value.error["type"] == "ValidationError"
    assert "encoded" in failed.value.error["message"]


def test_a_repeated_start_with_the_same_input_is_not_a_difference(app: App) -> None:
    first = app.start("w", {"a": 1}, idempotency_key="k")
    again = app.start("w", {"a": 1}, idempotency_key="k")
    assert first.id == again.id and not again.created
    assert again.warning is None or "differs" not in again.warning


def test_a_wrong_key_reads_as_undecodable_and_parks_the_run(database) -> None:  # type: ignore[no-untyped-def]
    writer = App(database.url, schema=database.schema, codec=FernetCodec(KEY))
    try:
        run_id = writer.start("victim", {"secret": 1}).id
    finally:
        writer.close()
    other = App(
        database.url,
        schema=database.schema,
        sweep_interval=0,
        codec=FernetCodec(FernetCodec.generate_key()),
    )
    ran: list[Any] = []
    try:
        assert isinstance(other.get_run(run_id).input, Undecodable)

        @other.workflow
        async def victim(ctx: Context, input: Any) -> Any:
            ran.append(input)
            return input

        with other.worker():
            wait_for(lambda: other.get_run(run_id).wake_reason == "undecodable", 30)
        run = other.get_run(run_id)
        assert (run.status, run.error, ran) == ("waiting", None, [])
    finally:
        other.close()


def test_values_stored_in_clear_before_the_codec_still_read(database) -> None:  # type: ignore[no-untyped-def]
    plain = App(database.url, schema=database.schema)
    try:
        run_id = plain.start("old", {"kept": True}).id
    finally:
        plain.close()
    coded = App(database.url, schema=database.schema, codec=FernetCodec(KEY))
    try:
        assert coded.get_run(run_id).input == {"kept": True}
    finally:
        coded.close()


def test_key_rotation_reads_values_sealed_with_the_old_key(database) -> None:  # type: ignore[no-untyped-def]
    old = App(database.url, schema=database.schema, codec=FernetCodec(KEY))
    try:
        run_id = old.start("rotated", {"n": 1}).id
    finally:
        old.close()
    new_key = FernetCodec.generate_key()
    rotated = App(database.url, schema=database.schema, codec=FernetCodec([new_key, KEY]))
    try:
        assert rotated.get_run(run_id).input == {"n": 1}
    finally:
        rotated.close()


def test_bad_codecs_and_keys_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        App("sqlite:///unused.db", codec=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        FernetCodec("not a key")
    with pytest.raises(ConfigurationError):
        FernetCodec([])
    with pytest.raises(ConfigurationError):
        FernetCodec(KEY, clear="order")


def test_flows_are_refused_with_a_codec(database) -> None:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, codec=FernetCodec(KEY))
    try:
        with pytest.raises(ConfigurationError, match="codec"):
            app.flow("sealed")
    finally:
        app.close()


def test_transactional_step_results_are_sealed_too(app: App, database) -> None:  # type: ignore[no-untyped-def]
    @app.workflow
    async def txn(ctx: Context, _: None) -> str:
        return await ctx.step.transaction("t", lambda conn: SECRETS["step"])

    with app.worker():
        assert app.run(txn, timeout=30) == SECRETS["step"]
    assert SECRETS["step"] not in raw_rows(database)


class _Inflating:
    """A codec whose text for the value "huge" is over the stored-value limit."""

    def encode(self, value: Any) -> str:
        return "x" * (11 * 1024 * 1024) if value == "huge" else json.dumps(value)

    def decode(self, data: str) -> Any:
        return json.loads(data)


def test_a_value_too_large_once_encoded_fails_its_run_not_the_batch(database) -> None:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, sweep_interval=0, codec=_Inflating())
    try:

        @app.workflow
        async def grows(ctx: Context, what: str) -> str:
            return await ctx.step.run("s", lambda: what.removeprefix("make-"))

        with app.worker():
            small = app.start(grows, "small")
            with pytest.raises(WorkflowFailed) as failed:
                app.run(grows, "make-huge", timeout=30)
            assert small.result(timeout=30) == "small"
        assert failed.value.error["type"] == "SerializationError"
        with pytest.raises(ValidationError):
            app.start(grows, "huge")  # refused at the start: nothing stored
    finally:
        app.close()
