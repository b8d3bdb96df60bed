"""Fixtures of the chaos suite: a `Lab` on the test's database, a throwaway cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import Lab, ThrowawayPostgres, throwaway_problem
from tests.conftest import Database


@pytest.fixture
def lab(database: Database, tmp_path: Path) -> Iterator[Lab]:
    """Worker processes and the oracle on the ``database`` fixture's database."""
    instance = Lab(database.kind, database.url, database.schema, tmp_path)
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def throwaway_pg() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL cluster of the test's own (never the shared server), started."""
    problem = throwaway_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the database-restart tests cannot run ({problem}) and CI is set")
        pytest.skip(problem)
    with ThrowawayPostgres() as pg:
        yield pg
