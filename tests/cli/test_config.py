"""The config file: found upward, `--config` and PERDURE_CONFIG first; the database URL
from the flag, then the environment, then the file; bad files are one clear error
naming the file and the key, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from perdure.cli.config import find_config, load_config, read_config
from perdure.errors import ConfigurationError
from tests.cli.test_project import _env, _perdure


def _migrate(cwd: Path, *args: str, **env: str) -> None:
    done = _perdure(cwd, _env(**env), *args, "migrate")
    assert done.returncode == 0, done.stderr


def test_the_database_comes_from_the_flag_then_the_environment_then_the_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.perdure]\ndatabase_url = "sqlite:///file.db"\n'
    )
    below = tmp_path / "src" / "deep"
    below.mkdir(parents=True)
    flag, env = f"sqlite:///{tmp_path / 'flag.db'}", f"sqlite:///{tmp_path / 'env.db'}"

    _migrate(below, "--database", flag, PERDURE_DATABASE_URL=env)
    assert [p.name for p in tmp_path.glob("*.db")] == ["flag.db"]
    _migrate(below, PERDURE_DATABASE_URL=env)
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["env.db", "flag.db"]
    _migrate(below)  # found upward; its relative path is beside the file, not here
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["env.db", "file.db", "flag.db"]
    assert not list(below.glob("*.db"))

    # An explicit config wins over the one found: --config, then PERDURE_CONFIG.
    (tmp_path / "a.toml").write_text('database_url = "sqlite:///a.db"\n')
    (tmp_path / "b.toml").write_text('database_url = "sqlite:///b.db"\n')
    _migrate(below, "--config", str(tmp_path / "a.toml"), PERDURE_CONFIG=str(tmp_path / "b.toml"))
    assert (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()
    _migrate(below, PERDURE_CONFIG=str(tmp_path / "b.toml"))
    assert (tmp_path / "b.db").exists()


def test_a_bad_config_file_is_one_clear_error_and_nothing_is_stored(tmp_path: Path) -> None:
    config = tmp_path / "perdure.toml"
    config.write_text('database_url = "sqlite:///x.db"\n[worker]\nconcurency = 4\n')
    for args in (("migrate",), ("worker",), ("runs", "list")):
        done = _perdure(tmp_path, _env(), *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert str(config) in done.stderr and "'worker.concurency'" in done.stderr
    missing = _perdure(tmp_path, _env(), "--config", "nope.toml", "migrate")
    assert missing.returncode == 2 and "config file nope.toml does not exist" in missing.stderr
    assert not list(tmp_path.glob("*.db"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("databse_url = 'x'\n", "unknown key 'databse_url'"),
        ("paths = 'flows'\n", "paths must be a list of paths (text), got 'flows'"),
        ("[worker]\nconcurrency = 0\n", "worker.concurrency must be an integer >= 1, got 0"),
        ("[worker]\nconcurrency = true\n", "worker.concurrency must be an integer >= 1"),
        ("[worker]\nlease = [1]\n", "worker.lease must be a duration"),
        ("[server]\nport = 70000\n", "server.port must be a port number from 0 to 65535"),
        ("[server]\nallowed_hosts = 'a.com'\n", "server.allowed_hosts must be a list"),
        ("[telemetry]\nmetrics_port = 'x'\n", "telemetry.metrics_port must be a port"),
        ("[telemetry]\nexporter = 'otlp'\n", "unknown key 'telemetry.exporter'"),
        ("worker = 3\n", "worker must be a table"),
        ("app = 'a:b'\npaths = ['x']\n", "give either app or paths, not both"),
        ("database_url = \n", "not valid TOML"),
    ],
)
def test_each_bad_value_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "perdure.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as caught:
        read_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_pyproject_keys_are_named_with_their_table(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.perdure.server]\nhots = 'x'\n")
    with pytest.raises(ConfigurationError, match=r"unknown key 'tool\.perdure\.server\.hots'"):
        read_config(path)
    path.write_text("[tool.ruff]\nline-length = 100\n")
    assert find_config(tmp_path) is None  # a pyproject.toml without the table is not one
    with pytest.raises(ConfigurationError, match=r"has no \[tool\.perdure\] table"):
        load_config(str(path), tmp_path)


def test_perdure_toml_beside_pyproject_wins_and_values_are_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.perdure]\napp = 'a:app'\n")
    (tmp_path / "perdure.toml").write_text(
        "paths = ['flows']\nignore = ['*_test.py']\ndatabase_url = 'sqlite:///db/p.db'\n"
        "[worker]\nconcurrency = 4\nlease = 20\nworkflows = ['orders.*']\n"
        "[server]\nhost = '0.0.0.0'\nport = 9000\nallowed_hosts = ['a.example']\n"
        "[telemetry]\nservice_name = 'shop'\nmetrics_port = 9464\n"
    )
    config = load_config(None, tmp_path)
    assert config.path == tmp_path / "perdure.toml" and config.app is None
    assert config.paths == ("flows",) and config.ignore == ("*_test.py",)
    assert config.database_url == f"sqlite:///{tmp_path.resolve() / 'db' / 'p.db'}"
    assert (config.worker.concurrency, config.worker.lease) == (4, 20)
    assert config.worker.workflows == ("orders.*",)
    assert (config.server.host, config.server.port) == ("0.0.0.0", 9000)
    assert config.server.allowed_hosts == ("a.example",)
    assert config.telemetry.otel_env() == {"OTEL_SERVICE_NAME": "shop"}
    assert config.telemetry.metrics_port == 9464
