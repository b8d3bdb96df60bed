"""The import graph points one way: public API → runtime → storage contract → backends.

Every import counts, including those under ``TYPE_CHECKING`` and inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "perdure"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        candidates: list[str] = []
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = (name if is_package else name.rsplit(".", 1)[0]).split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{node.module}" if node.module else anchor
            names = [f"{base}.{alias.name}" for alias in node.names]
            if node.module is None and all(n in modules for n in names):
                candidates = names  # ``from . import a, b``: the submodules, not the package
            else:
                candidates = [base, *names]
        targets.update(c for c in candidates if c in modules and c != name)
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _reaches(graph: dict[str, set[str]], start: str, prefix: str) -> list[str]:
    return sorted(t for t in graph[start] if t == prefix or t.startswith(prefix + "."))


def test_lower_layers_never_import_higher_ones() -> None:
    graph = _graph()
    layers = {
        # storage contract and backends: nothing of the runtime or the public API
        "perdure.backends": ("perdure.app", "perdure.engine", "perdure.worker", "perdure.cli"),
        # the engine: never the app, the worker or the CLI
        "perdure.engine": ("perdure.app", "perdure.worker", "perdure.cli", "perdure.handle"),
        # the worker: never the app or the CLI
        "perdure.worker": ("perdure.app", "perdure.cli"),
        # what a workflow body sees: never the engine that runs it
        "perdure.context": ("perdure.engine", "perdure.worker", "perdure.app"),
    }
    wrong = {}
    for module in graph:
        for layer, forbidden in layers.items():
            if module == layer or module.startswith(layer + "."):
                bad = [t for f in forbidden for t in _reaches(graph, module, f)]
                if bad:
                    wrong[module] = bad
    assert wrong == {}
