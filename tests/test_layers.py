"""The layering of docs/design.md, checked on every import of fedrun/ (inside functions and under TYPE_CHECKING
too): imports only point down the layer order, no import loop, no loose module at the top of the package."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

LAYERS = (
    "core", "host", "storage", "config", "data", "models", "algorithms",
    "metrics", "system", "upload", "privacy", "robust", "engines", "capabilities", "run", "report", "papers", "cli",
)  # fmt: skip
ROOT = REPO / "fedrun"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the fedrun modules it imports (``from fedrun.x import name`` names a module when it is one)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges[m].add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                edges[m] |= {a.name for a in node.names}
        edges[m] = {t for t in edges[m] if t in mods and t != m}
    return edges


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _loops(edges: dict[str, set[str]], mods: dict[str, Path]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan). An import of a package (its __init__,
    which only re-exports) is left out: what it names resolves to the module that defines it."""
    graph = {m: {t for t in ts if mods[t].name != "__init__.py"} for m, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_every_subpackage_is_a_layer_and_nothing_else_sits_at_the_top() -> None:
    mods = _modules()
    assert {_layer(m) for m in mods} - {""} == set(LAYERS)
    assert {m for m in mods if _layer(m) == "" or m.count(".") == 1 and not mods[m].name == "__init__.py"} == {"fedrun"}


def test_imports_only_point_down_the_layers() -> None:
    edges = _imports(_modules())
    upward = sorted(
        f"{m} -> {t}"
        for m, ts in edges.items()
        for t in ts
        if _layer(m) and _layer(t) and LAYERS.index(_layer(t)) > LAYERS.index(_layer(m))
    )
    assert upward == []


def test_no_import_loops() -> None:
    mods = _modules()
    assert _loops(_imports(mods), mods) == []
