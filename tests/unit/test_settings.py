import pytest

from perdure import App, ConfigurationError, ValidationError
from perdure.settings import Settings


def test_environment_then_defaults() -> None:
    settings = Settings.load(
        env={"PERDURE_DATABASE_URL": "sqlite:///x.db", "PERDURE_MAX_STEP_ATTEMPTS": "7"}
    )
    assert (settings.database_url, settings.max_step_attempts, settings.schema) == (
        "sqlite:///x.db",
        7,
        "perdure",
    )
    assert Settings.load("sqlite:///y.db", env={}).database_url == "sqlite:///y.db"


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_step_attempts": -5},
        {"max_step_attempts": "many"},
        {"max_payload_bytes": 10},
        {"max_retention_days": 0},
        {"sweep_interval": -1},
        {"read_only": "yes"},
        {"nonsense": 1},
    ],
)
def test_bad_overrides_are_rejected_at_construction(overrides: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        App("sqlite:///unused.db", **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["mysql://x", "sqlite://relative.db", "sqlite:///:memory:", ""])
def test_bad_urls_are_rejected_at_construction(url: str) -> None:
    with pytest.raises(ConfigurationError):
        App(url if url else 42)  # type: ignore[arg-type]


def test_bad_worker_options() -> None:
    app = App("sqlite:///unused.db")
    for kwargs in (
        {"concurrency": 0},
        {"lease": "soon"},
        {"poll_interval": "0s"},
        {"workflows": ["a b"]},
    ):
        with pytest.raises(ValidationError):
            app.worker(**kwargs)  # type: ignore[arg-type]
    assert app.worker(poll_interval="250ms")._poll_interval == 0.25


def test_perdure_read_only_takes_a_boolean() -> None:
    assert Settings.load(env={"PERDURE_READ_ONLY": "true"}).read_only is True
    assert Settings.load(env={}).read_only is False
    with pytest.raises(ConfigurationError, match="PERDURE_READ_ONLY"):
        Settings.load(env={"PERDURE_READ_ONLY": "maybe"})
