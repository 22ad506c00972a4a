"""The measurement modules (``runner/`` included) depend on each other one way: no import cycle,
not even through an import inside a function (``measure.cache`` <-> the Measurer's module <->
``timing`` used to form one)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "steptp" / "measure"


def _graph() -> dict[str, set[str]]:
    """Module (dotted, under ``steptp.measure``: ``cache``, ``runner.local``) -> the modules of
    ``steptp.measure`` it imports, relatively, anywhere in its body."""
    files = {".".join(p.relative_to(PKG).with_suffix("").parts): p for p in PKG.rglob("*.py")
             if p.stem != "__init__"}
    g: dict[str, set[str]] = {m: set() for m in files}
    for m, path in files.items():
        package = m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not 1 <= node.level <= len(package) + 1:
                continue
            base = package[:len(package) - (node.level - 1)]
            names = [node.module] if node.module else [a.name for a in node.names]
            for name in names:
                parts = base + name.split(".")
                # the module itself, or the package's module when a name is imported from it
                dep = next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                            if ".".join(parts[:k]) in files), None)
                if dep is not None:
                    g[m].add(dep)
    return {m: deps - {m} for m, deps in g.items()}


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
    assert "runner.local" in g and "runner.base" in g["runner.local"]   # the walk sees runner/
    assert not any(d.startswith("runner.") for d in g["timing"] | g["cache"])
    assert g["programs"] == set(), "programs is the bottom layer"
    assert _cycle(g) is None, f"import cycle: {' -> '.join(_cycle(g))}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("mod", ["programs", "cache", "timing", "runner.base", "runner.local",
                                 "runner.tasks", "runner.rpc", "runner.gpu"])
def test_each_module_imports_alone(mod):
    r = subprocess.run([sys.executable, "-c", f"import steptp.measure.{mod}"], capture_output=True,
                       text=True, cwd=PKG.parents[1], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
