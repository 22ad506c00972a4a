"""The package layers of docs/architecture.md hold: no module imports upward or sideways, and no
modules import each other in a cycle.

The table is read from the document itself (between its ``layers:begin`` / ``layers:end``
markers) so that the page and the check cannot drift apart. Every ``import`` counts, at module
level and inside functions, relative and absolute; cycles are about module-level imports (those
that run when a module is first imported), outside ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "steptp"
DOC = REPO / "docs" / "architecture.md"

# Cycles another branch is removing, each as the set of its modules. Empty: eval/policies/base
# and its subclasses (being untangled by the onehome branch) import each other, but base only
# inside make_policy, so no module-level cycle is left to allow.
KNOWN_CYCLES: list[frozenset[str]] = []


@dataclass(frozen=True)
class Import:
    file: Path          # the importing file
    line: int
    importer: str       # dotted module name of the importing file
    imported: str       # dotted name of the module imported (the deepest one that exists)
    module_level: bool  # runs when the importer is first imported


def layer_table(markdown: str) -> dict[str, int]:
    """``package -> layer`` from the table between the layer markers (packages in backticks in the
    second column, the layer number in the first)."""
    m = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", markdown, re.S)
    if m is None:
        raise ValueError("no <!-- layers:begin --> ... <!-- layers:end --> table")
    table: dict[str, int] = {}
    for row in m.group(1).splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[1]):
            if name in table:
                raise ValueError(f"{name} is in two layers ({table[name]} and {cells[0]})")
            table[name] = int(cells[0])
    return table


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, module_level: bool):
    """(import statement, runs at import time) for every import below ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, module_level
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, False)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), False)
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), module_level)
        else:
            yield from _walk(child, module_level)


def imports(root: Path) -> list[Import]:
    """Every import of a module of the package at ``root`` by a module of that package."""
    top = root.name
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {_module_name(p, root) for p in files}
    out: list[Import] = []
    for path in files:
        me = _module_name(path, root)
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        for node, module_level in _walk(ast.parse(path.read_text(), str(path)), True):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # ``from pkg import sub`` imports the module pkg.sub when there is one
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            for t in dict.fromkeys(targets):
                if t != top and not t.startswith(top + "."):
                    continue
                while t not in modules and "." in t:   # ``import a.b.name``: the module a.b
                    t = t.rpartition(".")[0]
                out.append(Import(path, node.lineno, me, t, module_level))
    return out


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(found: list[Import], table: dict[str, int]) -> list[str]:
    """Each import that does not go strictly down the table, as ``file:line: ...``."""
    problems = []
    for i in found:
        a, b = _component(i.importer), _component(i.imported)
        where = f"{i.file}:{i.line}"
        for name in dict.fromkeys((a, b)):
            if name not in table:
                problems.append(f"{where}: {i.importer} imports {i.imported}: package {name!r} is in no "
                                f"layer of docs/architecture.md")
        if a == b or a not in table or b not in table:
            continue
        if table[b] >= table[a]:
            how = "sideways" if table[b] == table[a] else "upward"
            problems.append(f"{where}: {i.importer} (layer {table[a]}, {a}) imports {i.imported} "
                            f"(layer {table[b]}, {b}): {how}")
    return problems


def import_cycles(found: list[Import], known: list[frozenset[str]] = ()) -> list[str]:
    """Each cycle of module-level imports (a strongly connected set of modules), with the imports
    that close it, as ``file:line: a imports b``; cycles listed in ``known`` are left out."""
    graph: dict[str, list[Import]] = {}
    for i in found:
        if i.module_level and i.importer != i.imported:
            graph.setdefault(i.importer, []).append(i)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in graph.get(v, ()):
            w = e.imported
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    problems = []
    for comp in components:
        if frozenset(comp) in known:
            continue
        edges = [f"{e.file}:{e.line}: {e.importer} imports {e.imported}"
                 for v in sorted(comp) for e in graph[v] if e.imported in comp]
        problems.append(f"import cycle between {', '.join(sorted(comp))}:\n  " + "\n  ".join(edges))
    return problems


def private_imports(found: list[Import]) -> list[str]:
    """Each import of a private module (``_name``) from outside the package that holds it."""
    problems = []
    for i in found:
        owner, _, name = i.imported.rpartition(".")
        if name.startswith("_") and not name.startswith("__") and not (
                i.importer == owner or i.importer.startswith(owner + ".")):
            problems.append(f"{i.file}:{i.line}: {i.importer} imports {i.imported}, private to {owner}")
    return problems


# ---------------------------------------------------------------------------- the package
@functools.lru_cache(maxsize=1)
def _package_imports() -> tuple[Import, ...]:
    return tuple(imports(PACKAGE))


def test_every_import_goes_down_the_layer_table():
    problems = upward_imports(list(_package_imports()), layer_table(DOC.read_text()))
    assert not problems, "imports against docs/architecture.md's layers:\n" + "\n".join(problems)


def test_no_module_level_import_cycles():
    problems = import_cycles(list(_package_imports()), KNOWN_CYCLES)
    assert not problems, "\n".join(problems)


def test_private_modules_are_imported_only_inside_their_package():
    problems = private_imports(list(_package_imports()))
    assert not problems, "\n".join(problems)


def test_the_table_places_every_package():
    table = layer_table(DOC.read_text())
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.is_file() and p.suffix == ".py" and p.name != "__init__.py")
             or (p.is_dir() and (p / "__init__.py").exists())}
    assert parts | {"steptp"} == set(table), (
        f"not in the table: {sorted(parts - set(table))}; in the table, not in the package: "
        f"{sorted(set(table) - parts - {'steptp'})}")


# ---------------------------------------------------------------------------- the checker itself
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_the_checker_reports_upward_imports_and_cycles(tmp_path):
    pkg = tmp_path / "pkg"
    _write(pkg, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "X = 1\n\n\ndef f():\n    from ..high import b\n    return b\n",   # upward, in a function
        "low/c.py": "import pkg.high.b\n",                                             # upward, absolute
        "high/__init__.py": "",
        "high/b.py": "from ..low import a\n",                                           # downward: fine
        "high/d.py": "from . import e\n",                                               # d <-> e: a cycle
        "high/e.py": "from .d import thing\n",
        "high/f.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import g\n",
        "high/g.py": "from . import f\n",                                               # not a runtime cycle
        "side/__init__.py": "from ..high import b\n",                                   # same layer
        "stray/__init__.py": "",
        "stray/s.py": "from ..low import a\n",                                          # in no layer
        "low/_own.py": "",
        "low/uses_own.py": "from . import _own\n",                                      # its own: fine
        "high/h.py": "from ..low._own import x\n",                                      # another's private
    })
    table = layer_table("<!-- layers:begin -->\n| layer | packages |\n| ---: | --- |\n"
                        "| 1 | `high`, `side` |\n| 0 | `pkg`, `low` |\n<!-- layers:end -->\n")
    found = imports(pkg)
    up = upward_imports(found, table)
    assert f"{pkg / 'low' / 'a.py'}:5: pkg.low.a (layer 0, low) imports pkg.high.b (layer 1, high): upward" in up
    assert f"{pkg / 'low' / 'c.py'}:1: pkg.low.c (layer 0, low) imports pkg.high.b (layer 1, high): upward" in up
    assert f"{pkg / 'side' / '__init__.py'}:1: pkg.side (layer 1, side) imports pkg.high.b (layer 1, high): sideways" in up
    assert any(p.startswith(f"{pkg / 'stray' / 's.py'}:1:") and "'stray' is in no layer" in p for p in up)
    assert len(up) == 4
    cycles = import_cycles(found)
    assert cycles == [f"import cycle between pkg.high.d, pkg.high.e:\n"
                      f"  {pkg / 'high' / 'd.py'}:1: pkg.high.d imports pkg.high.e\n"
                      f"  {pkg / 'high' / 'e.py'}:1: pkg.high.e imports pkg.high.d"]
    assert import_cycles(found, [frozenset({"pkg.high.d", "pkg.high.e"})]) == []
    assert private_imports(found) == [f"{pkg / 'high' / 'h.py'}:1: pkg.high.h imports pkg.low._own, "
                                      f"private to pkg.low"]


def test_the_table_reader_refuses_a_package_in_two_layers():
    import pytest

    with pytest.raises(ValueError, match="x is in two layers"):
        layer_table("<!-- layers:begin -->\n| 1 | `x` |\n| 0 | `x` |\n<!-- layers:end -->")
