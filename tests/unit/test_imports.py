"""The package's import graph (read with ast, nothing imported): no cycles, and the simulators stay off the I/O
shells (docs: "Pure core, thin shells")."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainer", "faults", "chaos", "benchmarks")
# Deterministic mode and the scale simulator share the core with the gRPC services; they never need the services.
SIMULATORS = ("chaos.sim", "chaos.scale")
SHELLS = ("trainer.syncer", "trainer.learner", "chaos.controller")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if "proto" not in p.parts
    }


def imported(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """Project modules ``name`` imports anywhere in its file (top level, in functions, for type checking)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            # ``from pkg import sub`` depends on the submodule; ``from mod import name`` on the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                yield t


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: set(imported(path, name, set(mods))) for name, path in mods.items()}


def reachable(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in g.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle once, as the modules on it (Tarjan's strongly connected components, size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_the_package() -> None:
    g = graph()
    assert "chaos.sim.runner" in g and "trainer.core.syncer_state" in g["chaos.sim.syncer_node"]
    assert "chaos.controller" in reachable(g, "chaos.cli")  # imports inside functions count too


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, f"import cycles: {found}; move what both sides need into a module that neither imports"


def test_the_simulators_do_not_import_the_io_shells() -> None:
    g = graph()
    bad = {m: sorted(reachable(g, m) & set(SHELLS)) for m in g if m.startswith(SIMULATORS)}
    bad = {m: s for m, s in bad.items() if s}
    assert not bad, (
        f"simulator modules reach I/O shells {bad}: share the pure piece (trainer.core, trainer.policy)"
    )


def test_the_scenario_schema_does_not_import_the_launcher() -> None:
    assert "trainer.launch" not in reachable(graph(), "chaos.scenario")


def test_the_negative_control_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
