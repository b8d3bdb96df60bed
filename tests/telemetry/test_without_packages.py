"""Without prometheus-client and OpenTelemetry a worker runs as before and imports
neither; asking for metrics then is a clear error. Bad metrics ports are refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perdure import App, ValidationError

SCRIPT = textwrap.dedent(
    """
    import sys

    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("prometheus_client", "opentelemetry"):
                raise ImportError(f"{name} is not installed")
            return None

    sys.meta_path.insert(0, Absent())

    from perdure import App, ConfigurationError

    app = App(sys.argv[1])

    @app.workflow
    async def hello(ctx, name):
        return await ctx.step.run("greet", lambda: f"hi {name}")

    with app.worker():
        assert app.run(hello, "ada", timeout=30) == "hi ada"
    try:
        app.worker(metrics_port=0)
    except ConfigurationError as exc:
        print("refused:", exc)
    app.close()
    absent = ("prometheus_client", "opentelemetry")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in absent)
    print("loaded:", loaded)
    """
)


def test_a_worker_without_the_packages_imports_neither_and_metrics_are_refused_clearly(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path / 'db.sqlite'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout, result.stdout
    assert "refused: serving metrics needs prometheus-client" in result.stdout, result.stdout


@pytest.mark.parametrize("port", [-1, 65536, True, "9464", 1.5])
def test_a_bad_metrics_port_is_refused(port: object, tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        with pytest.raises(ValidationError, match="metrics_port"):
            app.worker(metrics_port=port)  # type: ignore[arg-type]
    finally:
        app.close()


@pytest.mark.parametrize("host", ["", None, 1])
def test_a_bad_metrics_host_is_refused(host: object, tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        with pytest.raises(ValidationError, match="metrics_host"):
            app.worker(metrics_port=0, metrics_host=host)  # type: ignore[arg-type]
    finally:
        app.close()


def test_a_metrics_port_in_use_stops_the_worker_with_a_clear_error(tmp_path: Path) -> None:
    import socket

    from perdure import ConfigurationError

    app = App(f"sqlite:///{tmp_path / 'db.sqlite'}")

    @app.workflow
    async def hello(ctx: object, _: None) -> None:
        return None

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            with (
                pytest.raises(
                    ConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{port}"
                ),
                app.worker(metrics_port=port),
            ):
                pass
            assert [w for w in app.list_workers() if w.stopped_at is None] == []
        finally:
            app.close()
