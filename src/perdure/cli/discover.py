"""Workflow discovery: the App of a project whose config names paths, not an app.

It imports every module under the configured paths (relative to the config file's
directory, which becomes importable) except those an ``ignore`` glob matches, and
returns the one `App` they use: their workflows and flows are registered on it by
the import. Two Apps, or none, is a `ConfigurationError` that says what was found
and where.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from ..app import App
from ..errors import ConfigurationError

__all__ = ["Discovered", "discover", "module_files"]

_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})


@dataclass(frozen=True, slots=True)
class Discovered:
    """The App found, and where: ``module:attribute`` of each name bound to it."""

    app: App
    found_at: tuple[str, ...]
    modules: tuple[str, ...]


def module_files(root: Path, paths: Sequence[str], ignore: Sequence[str]) -> list[Path]:
    """The ``.py`` files under ``paths`` (files or directories, relative to ``root``)
    that no ``ignore`` glob matches; a glob matches a path relative to ``root``
    (``workflows/legacy/*``) or a file's name (``*_test.py``)."""
    found: list[Path] = []
    for entry in paths:
        base = (root / entry).resolve()
        if not base.exists():
            raise ConfigurationError(f"discovery path {entry!r} does not exist under {root}")
        if root != base and root not in base.parents:
            raise ConfigurationError(f"discovery path {entry!r} is outside {root}")
        files = [base] if base.is_file() else sorted(_walk(base))
        for file in files:
            relative = file.relative_to(root).as_posix()
            if file.suffix != ".py" or _ignored(relative, file.name, ignore):
                continue
            if file not in found:
                found.append(file)
    return found


def _walk(directory: Path) -> Iterator[Path]:
    for child in sorted(directory.iterdir()):
        if child.is_dir():
            if child.name.startswith(".") or child.name in _SKIPPED_DIRS:
                continue
            yield from _walk(child)
        elif child.suffix == ".py":
            yield child


def _ignored(relative: str, name: str, ignore: Sequence[str]) -> bool:
    parts = relative.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts))]
    return any(
        fnmatch(relative, glob) or fnmatch(name, glob) or any(fnmatch(p, glob) for p in prefixes)
        for glob in ignore
    )


def _module_name(root: Path, file: Path) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        raise ConfigurationError(
            f"{file.relative_to(root)} cannot be imported as a module (rename it, or ignore it)"
        )
    return ".".join(parts)


def discover(root: Path, paths: Sequence[str], ignore: Sequence[str]) -> Discovered:
    """Import the modules under ``paths`` and return the one App they use."""
    files = module_files(root, paths, ignore)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    modules: list[str] = []
    apps: dict[int, tuple[App, list[str]]] = {}
    for file in files:
        name = _module_name(root, file)
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # the user's module: any error it raises is theirs
            raise ConfigurationError(
                f"discovery could not import {name} ({file}): {type(exc).__name__}: {exc}"
            ) from exc
        modules.append(name)
        for attr, value in list(vars(module).items()):
            if isinstance(value, App):
                apps.setdefault(id(value), (value, []))[1].append(f"{name}:{attr}")
    where = ", ".join(paths)
    if not apps:
        imported = ", ".join(modules) or "none"
        raise ConfigurationError(
            f"discovery found no perdure.App under {where} (modules imported: {imported}); "
            "create one (app = perdure.App()) or name it with app = 'module:attribute'"
        )
    if len(apps) > 1:
        listed = "; ".join(" = ".join(names) for _, names in apps.values())
        raise ConfigurationError(
            f"discovery found {len(apps)} perdure.App objects under {where}: {listed}. "
            "Use one App for the project, or name it with app = 'module:attribute'"
        )
    app, found_at = next(iter(apps.values()))
    return Discovered(app=app, found_at=tuple(found_at), modules=tuple(modules))
