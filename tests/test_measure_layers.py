"""The measurement modules depend on each other one way: no import cycle, not even through an
import inside a function (``measure.cache`` <-> ``service`` <-> ``timing`` used to form one)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "steptp" / "measure"


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        for node in ast.walk(ast.parse((PKG / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    g[m].add(node.module.split(".")[0])
                else:
                    g[m].update(a.name for a in node.names)
    return {m: {d for d in deps if d in mods and d != m} for m, deps in g.items()}


def _cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_measure_modules_import_one_way():
    g = _graph()
    assert "service" not in g["timing"] and "service" not in g["cache"]
    assert g["programs"] == set(), "programs is the bottom layer"
    assert _cycle(g) is None, f"import cycle: {' -> '.join(_cycle(g))}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("mod", ["programs", "cache", "timing", "service", "tasks", "rpc"])
def test_each_module_imports_alone(mod):
    r = subprocess.run([sys.executable, "-c", f"import steptp.measure.{mod}"], capture_output=True,
                       text=True, cwd=PKG.parents[1], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
