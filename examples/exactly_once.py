"""A transactional step: the payment row and the step's journal entry commit together,
so the payment is recorded exactly once, whatever crashes and retries happen.

Run it: python examples/exactly_once.py   (SQLite by default; PERDURE_DATABASE_URL may
name a PostgreSQL database instead)
"""

import os
import sqlite3
from typing import Any

from perdure import App, Context

app = App()  # ./perdure.db, or PERDURE_DATABASE_URL
URL = os.environ.get("PERDURE_DATABASE_URL", "sqlite:///perdure.db")
# On PostgreSQL the table may live in any schema of the same database; here, beside
# perdure's own (named in full, as the step's connection has the application's path).
SCHEMA = os.environ.get("PERDURE_SCHEMA", "perdure")


def record_sqlite(run_id: str, amount: int) -> Any:
    def record(conn: sqlite3.Connection) -> int:  # a table in the run database's file
        conn.execute("CREATE TABLE IF NOT EXISTS payments (run_id TEXT, amount INTEGER)")
        conn.execute("INSERT INTO payments VALUES (?, ?)", (run_id, amount))
        return conn.execute("SELECT count(*) FROM payments").fetchone()[0]

    return record


def record_postgres(run_id: str, amount: int) -> Any:
    from psycopg import sql

    table = sql.Identifier(SCHEMA, "payments")

    async def record(conn: Any) -> int:  # a psycopg AsyncConnection, inside the transaction
        await conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (run_id text, amount integer)").format(table)
        )
        await conn.execute(
            sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(table), (run_id, amount)
        )
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
        return (await cur.fetchone())[0]

    return record


@app.workflow
async def pay(ctx: Context, amount: int) -> str:
    record = record_sqlite if URL.startswith("sqlite") else record_postgres
    count = await ctx.step.transaction("record-payment", record(ctx.run_id, amount))
    return f"recorded {amount} once ({count} payment(s) in the table)"


if __name__ == "__main__":
    with app.worker():
        print(app.run(pay, 42, timeout=30))
    app.close()
