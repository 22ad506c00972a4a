"""LEIR-native workloads: hand-written fused kernels, stored as LEIR templates.

The other suites import PyTorch models through Relax, and TVM emits one operator per statement,
so a kernel whose value is one whole formula (an IoU, an optimizer step, a loss, a one-kernel
attention) never comes out of them. The kernels here are written the way people write them by
hand in Triton or CUDA: one expression per output, intermediates only where the real code keeps
a local (a row max, a running sum). They give the algebraic and algorithmic strategies real sites.

A **LEIR template** is a LEIR file with, optionally, ``{NAME}`` placeholders and a header of
comment directives before the ``kernel`` line::

    # Box IoU of every pair of boxes, as torchvision.ops.box_iou computes it.
    # family: detection
    # strategies: apart
    # size tiny: N=8 M=16
    # size default: N=300 M=50
    kernel f32 box_iou(boxes1[{N},4], boxes2[{M},4]) -> iou[{N},{M}]
     ...

* the other comment lines before the ``kernel`` line are the description (where the kernel
  comes from in real code);
* ``# family: WORD`` groups workloads; ``# strategies: a, b`` lists the strategies the kernel is
  meant to host (checked by the tests);
* ``# size NAME: K=V K=V`` gives the placeholder values of one size preset; values are integer or
  float literals (parsed, never evaluated). A template with placeholders needs ``size tiny`` and
  ``size default``; a plain LEIR file needs no header at all.

Rendering replaces every ``{NAME}`` by its value; the result is ordinary LEIR (the comments
included), parsed and checked as usual. Errors (:class:`LeirTemplateError`) name the file, and
the line and column *in the template*, with the offending line quoted.

``steptp extract --leir PATH`` reads user files in the same format (see
``steptp.zoo.extract.refs_for_leir``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["LeirTemplate", "LeirTemplateError", "parse_template", "load_file", "load_path",
           "builtin", "workload", "WORKLOADS"]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DIRECTIVE = re.compile(r"^#\s*(family|strategies|size\s+([A-Za-z_][A-Za-z0-9_]*))\s*:(.*)$")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^\s,]+)")
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")
_REQUIRED_SIZES = ("tiny", "default")


class LeirTemplateError(ValueError):
    """A LEIR template (or plain LEIR file) that cannot be read, rendered, parsed or checked.
    ``line``/``column`` are 1-based positions in the template file (None when unknown)."""

    def __init__(self, source: str, message: str, line: int | None = None,
                 column: int | None = None, text: str | None = None, more: str = ""):
        self.source, self.detail, self.line, self.column = source, message, line, column
        where = f"line {line}, column {column}: " if line is not None and column is not None \
            else f"line {line}: " if line is not None else ""
        snippet = ""
        if text is not None and line is not None:
            lines = text.splitlines()
            if 0 < line <= len(lines):
                snippet = f"\n    {lines[line - 1]}"
                if column is not None:
                    snippet += f"\n    {' ' * max(column - 1, 0)}^"
        super().__init__(f"{source}: {where}{message}{snippet}{more}")


def _number(text: str) -> int | float | None:
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text) or text in ("inf", "-inf"):
        return float(text)
    return None


@dataclass(frozen=True)
class LeirTemplate:
    """One LEIR template: its text, header metadata and size presets."""

    name: str
    text: str
    source: str
    description: str = ""
    family: str = "leir"
    strategies: tuple[str, ...] = ()
    sizes: dict[str, dict[str, int | float]] = field(default_factory=dict)
    placeholders: tuple[str, ...] = ()

    def render(self, size: str | dict[str, Any] = "tiny") -> str:
        """The LEIR text for a size preset (or for explicit placeholder values)."""
        return self._render(size)[0]

    def _render(self, size: str | dict[str, Any]) -> tuple[str, dict[int, list[int]]]:
        if isinstance(size, str):
            if size not in self.sizes:
                raise LeirTemplateError(self.source, f"no size {size!r}; sizes: "
                                        f"{', '.join(sorted(self.sizes)) or '(none)'}")
            values = self.sizes[size]
        else:
            values = dict(size)
        return _substitute(self.text, values, self.source)

    def program(self, size: str | dict[str, Any] = "tiny"):
        """The parsed and checked program for a size preset; errors point into the template."""
        from steptp.leir import LeirSyntaxError, check, parse
        from steptp.leir.check import LeirCheckError

        text, colmap = self._render(size)

        def col(line: int | None, c: int | None) -> int | None:
            """A column of the rendered text -> the same place in the template."""
            if line is None or c is None or line not in colmap:
                return c
            m = colmap[line]
            if 0 < c <= len(m):
                return m[c - 1] + 1
            return len(self.text.split("\n")[line - 1]) + 1 + max(c - 1 - len(m), 0)

        try:
            prog = parse(text)
        except LeirSyntaxError as e:
            raise LeirTemplateError(self.source, e.detail, e.line, col(e.line, e.column),
                                    self.text) from None
        try:
            check(prog)
        except LeirCheckError as e:
            first = e.problems[0]
            more = "".join(f"\n  line {p.line}, column {col(p.line, p.column)}: {p.message}"
                           for p in e.problems[1:])
            raise LeirTemplateError(self.source, first.message, first.line,
                                    col(first.line, first.column), self.text, more) from None
        return prog


def _substitute(text: str, values: dict[str, Any], source: str
                ) -> tuple[str, dict[int, list[int]]]:
    """Replace the ``{NAME}`` placeholders; also returns, for each changed line, the template
    column (0-based) of every rendered character."""
    out_lines: list[str] = []
    colmap: dict[int, list[int]] = {}
    for n, line in enumerate(text.split("\n"), start=1):
        if "{" not in line or line.lstrip().startswith("#"):
            out_lines.append(line)
            continue
        pieces: list[str] = []
        cols: list[int] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(line):
            key = m.group(1)
            if key not in values:
                raise LeirTemplateError(source, f"placeholder {{{key}}} has no value in this size "
                                        f"(known: {', '.join(sorted(values)) or 'none'})",
                                        n, m.start() + 1, text)
            pieces.append(line[pos:m.start()])
            cols.extend(range(pos, m.start()))
            v = values[key]
            rendered = repr(float(v)) if isinstance(v, float) else str(v)
            pieces.append(rendered)
            cols.extend([m.start()] * len(rendered))
            pos = m.end()
        pieces.append(line[pos:])
        cols.extend(range(pos, len(line)))
        out_lines.append("".join(pieces))
        colmap[n] = cols
    return "\n".join(out_lines), colmap


def parse_template(text: str, source: str = "<string>", name: str | None = None) -> LeirTemplate:
    """Read the header directives and placeholders of a template (the LEIR itself is parsed by
    :meth:`LeirTemplate.program`)."""
    lines = text.split("\n")
    desc: list[str] = []
    family, strategies = "leir", ()
    sizes: dict[str, dict[str, int | float]] = {}
    kernel_line = None
    for n, raw in enumerate(lines, start=1):
        s = raw.strip()
        if not s:
            continue
        if not s.startswith("#"):
            kernel_line = n
            break
        m = _DIRECTIVE.match(s)
        if m is None:
            desc.append(s[1:].strip())
            continue
        key, size_name, rest = m.group(1), m.group(2), m.group(3)
        rest_col = raw.index(s) + m.start(3) + 1
        if key == "family":
            family = rest.strip() or family
        elif key == "strategies":
            strategies = tuple(x.strip() for x in rest.split(",") if x.strip())
        else:
            if size_name in sizes:
                raise LeirTemplateError(source, f"size {size_name!r} is given twice", n, None, text)
            vals: dict[str, int | float] = {}
            consumed = set()
            for a in _ASSIGN.finditer(rest):
                v = _number(a.group(2))
                if v is None:
                    raise LeirTemplateError(
                        source, f"size {size_name}: {a.group(1)}={a.group(2)} is not an integer or "
                        f"float literal", n, rest_col + a.start(2), text)
                vals[a.group(1)] = v
                consumed.update(range(a.start(), a.end()))
            stray = [i for i, ch in enumerate(rest) if i not in consumed and ch not in " \t,"]
            if stray:
                raise LeirTemplateError(source, f"size {size_name}: expected NAME=VALUE pairs",
                                        n, rest_col + stray[0], text)
            sizes[size_name] = vals
    if kernel_line is None:
        raise LeirTemplateError(source, "no `kernel` line (the file is empty or all comments)",
                                len(lines), 1, text)
    first_use: dict[str, tuple[int, int]] = {}
    for n, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        for m in _PLACEHOLDER.finditer(line):
            first_use.setdefault(m.group(1), (n, m.start() + 1))
    used = list(first_use)
    if used:
        missing = [s for s in _REQUIRED_SIZES if s not in sizes]
        if missing:
            raise LeirTemplateError(
                source, f"the template uses placeholders ({', '.join('{' + u + '}' for u in used)})"
                f" but has no `# size {missing[0]}: ...` line giving their values",
                kernel_line, 1, text)
        for sname, vals in sizes.items():
            lacking = [u for u in used if u not in vals]
            if lacking:
                line, col = first_use[lacking[0]]
                raise LeirTemplateError(source, f"placeholder {{{lacking[0]}}} has no value in "
                                        f"`# size {sname}:`", line, col, text)
    else:
        base = sizes.get("tiny") or sizes.get("default") or {}
        for s in _REQUIRED_SIZES:
            sizes.setdefault(s, dict(base))
    if name is None:
        name = Path(source).stem if source and not source.startswith("<") else "leir"
    return LeirTemplate(name=name, text=text, source=source, description=" ".join(desc),
                        family=family, strategies=strategies, sizes=sizes,
                        placeholders=tuple(used))


def load_file(path: str | Path, check_sizes: tuple[str, ...] = ()) -> LeirTemplate:
    """Read one template file; ``check_sizes``: presets rendered, parsed and checked now."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise LeirTemplateError(str(p), f"cannot read: {why}") from None
    t = parse_template(text, str(p))
    for s in check_sizes:
        t.program(s)
    return t


def load_path(path: str | Path, check_sizes: tuple[str, ...] = ()) -> list[LeirTemplate]:
    """A ``.leir`` file, or every ``*.leir`` file of a folder (sorted by name, not recursive)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".leir" and f.is_file())
        if not files:
            raise LeirTemplateError(str(p), "the folder holds no .leir file")
        return [load_file(f, check_sizes) for f in files]
    if not p.exists():
        raise LeirTemplateError(str(p), "no such file or folder")
    return [load_file(p, check_sizes)]


def builtin() -> list[LeirTemplate]:
    """The zoo's templates (``steptp/zoo/leir/*.leir``), sorted by name; the ``examples/``
    folder beside them is ``steptp.examples``, not part of the suite."""
    out = []
    for f in sorted(resources.files(__package__).iterdir(), key=lambda f: f.name):
        if f.name.endswith(".leir"):
            out.append(parse_template(f.read_text(), f"steptp/zoo/leir/{f.name}"))
    return out


# ----------------------------------------------------------------------------- workloads
@functools.cache
def _module_class():
    import torch
    from torch import nn

    class _LeirModule(nn.Module):
        """Runs a LEIR program with the NumPy interpreter (``steptp.leir.interp``): the reference
        semantics of a LEIR-native workload. Meant for small sizes; not exportable."""

        def __init__(self, program) -> None:
            super().__init__()
            self.program = program

        def forward(self, *args):
            from steptp.leir.interp import run

            outs = run(self.program, [a.detach().cpu().numpy() for a in args])
            res = tuple(torch.from_numpy(outs[t.name]) for t in self.program.outputs)
            return res[0] if len(res) == 1 else res

        def extra_repr(self) -> str:
            return self.program.name

    return _LeirModule


def workload(t: LeirTemplate, suite: str = "leir"):
    """A ``Workload`` for a template. ``build(size)`` gives a module that runs the program with the
    NumPy interpreter and seeded inputs (``steptp.measure.verify.random_inputs``); extraction uses
    the program itself (``Workload.leir_program``)."""
    from steptp.zoo._base import FP32_ONLY, Workload

    def factory(params: dict[str, Any], gen):
        import torch

        from steptp.measure.verify import random_inputs

        prog = t.program(params)
        ins = random_inputs(prog, seed=int(gen.initial_seed()) & 0x7FFFFFFF)
        return _module_class()(prog), tuple(torch.from_numpy(x) for x in ins)

    desc = t.description or f"LEIR kernel from {t.source}"
    return Workload(name=t.name, suite=suite, family=t.family, factory=factory,
                    sizes={k: dict(v) for k, v in t.sizes.items()}, dtypes=FP32_ONLY,
                    description=desc,
                    meta={"leir_template": t, "strategies": list(t.strategies),
                          "source": t.source})


WORKLOADS = [workload(t, "leir") for t in builtin()]
