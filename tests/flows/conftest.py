from collections.abc import Iterator

import pytest

from perdure import App


@pytest.fixture
def app(database) -> Iterator[App]:  # type: ignore[no-untyped-def]
    """An App on a fresh database of each backend (sqlite file / postgres schema)."""
    app = App(database.url, schema=database.schema, sweep_interval=0)
    yield app
    app.close()
