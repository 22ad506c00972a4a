"""The ground truth a step's reasoning may cite: ``facts(step)``.

Every writer (template, LLM) and the validator use this one function, so a number in the
reasoning is either one of these facts (within rounding) or an error. Facts come from the
program analyses of the before- and after-programs (loop extents, reduction axes, footprints,
FLOPs, bytes moved, arithmetic intensity, the innermost stride of each access) and from the
measurements (runtimes, speedups, error).

``Facts.numbers`` maps a label (``"loop.k.extent"``, ``"before.median_s"``...) to a value in base
units (seconds, bytes, operations, elements); ``Facts.prompt()`` is the JSON-able view an LLM is
shown.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from ..leir import ast as A
from ..leir.analysis import ITEMSIZE, Analysis, affine
from ..leir.parser import parse
from ..leir.printer import format_stmt
from ..records import StepRecord, canonical_json


@dataclass(frozen=True)
class TensorFact:
    name: str
    role: str            # input | output | intermediate
    dtype: str
    shape: tuple[int, ...]
    elements: int
    bytes: int


@dataclass(frozen=True)
class LoopFact:
    var: str
    extent: int
    kind: str
    depth: int
    path: tuple[int, ...]
    carries_dependence: bool


@dataclass(frozen=True)
class AccessFact:
    tensor: str
    write: bool
    text: str                 # e.g. A[i,k]
    stride: Optional[int]     # elements between consecutive iterations of the innermost loop


@dataclass(frozen=True)
class StmtFact:
    path: tuple[int, ...]
    text: str                 # the assignment as printed (one line)
    tensor: str
    op: str
    loops: tuple[str, ...]
    innermost: Optional[str]
    reduction_axes: tuple[str, ...]
    iterations: int
    flops: int
    accesses: tuple[AccessFact, ...]


@dataclass(frozen=True)
class ProgramFacts:
    name: str
    tensors: dict[str, TensorFact]
    loops: tuple[LoopFact, ...]
    statements: tuple[StmtFact, ...]
    flops: int
    bytes_moved: int
    arithmetic_intensity: float
    footprint_bytes: dict[str, int]   # per tensor: bytes of the bounding box touched
    constants: tuple[float, ...] = ()  # numeric literals of the program text

    @property
    def loop_vars(self) -> tuple[str, ...]:
        out: dict[str, None] = {}
        for lp in self.loops:
            out.setdefault(lp.var, None)
        return tuple(out)

    def loop(self, var: str) -> Optional[LoopFact]:
        return next((lp for lp in self.loops if lp.var == var), None)

    @property
    def hot_statement(self) -> StmtFact:
        return max(self.statements, key=lambda s: (s.flops, -s.path.__len__()))


@dataclass(frozen=True)
class Facts:
    step_key: str
    kernel: str
    strategy: str
    family: str
    exactness: str
    site: dict[str, Any]
    params: dict[str, Any]
    target: str
    outcome: str
    before: ProgramFacts
    after: Optional[ProgramFacts]
    before_s: Optional[float]
    after_s: Optional[float]
    before_min_s: Optional[float]
    after_min_s: Optional[float]
    noise: float                      # relative noise level: max spread of the two timings
    step_speedup: Optional[float]
    cumulative_speedup: Optional[float]
    max_abs_err: Optional[float]
    before_text: str = ""
    after_text: str = ""
    numbers: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------ names
    @property
    def names_before(self) -> frozenset[str]:
        return frozenset(self.before.loop_vars) | frozenset(self.before.tensors)

    @property
    def names_after(self) -> frozenset[str]:
        if self.after is None:
            return frozenset()
        return frozenset(self.after.loop_vars) | frozenset(self.after.tensors)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.before.tensors.values() if t.role == "output")

    def prompt(self) -> dict[str, Any]:
        """What the LLM is shown: every citable fact, grouped, in base units."""
        def prog(p: ProgramFacts) -> dict[str, Any]:
            return {
                "tensors": [{"name": t.name, "role": t.role, "dtype": t.dtype, "shape": list(t.shape),
                             "bytes": t.bytes} for t in p.tensors.values()],
                "loops": [{"var": lp.var, "extent": lp.extent, "kind": lp.kind, "depth": lp.depth,
                           "path": list(lp.path), "carries_dependence": lp.carries_dependence}
                          for lp in p.loops],
                "statements": [{"path": list(s.path), "text": s.text, "loops": list(s.loops),
                                "reduction_axes": list(s.reduction_axes), "iterations": s.iterations,
                                "flops": s.flops,
                                "innermost_loop": s.innermost,
                                "innermost_strides": {a.text: a.stride for a in s.accesses
                                                      if a.stride is not None}}
                               for s in p.statements],
                "flops": p.flops, "bytes_moved": p.bytes_moved,
                "arithmetic_intensity": round(p.arithmetic_intensity, 4),
                "footprint_bytes": p.footprint_bytes,
            }
        out: dict[str, Any] = {"kernel": self.kernel, "target": self.target,
                               "before": prog(self.before)}
        if self.after is not None:
            out["after_loops"] = [{"var": lp.var, "extent": lp.extent, "kind": lp.kind}
                                  for lp in self.after.loops]
        out["measured"] = {k: v for k, v in {
            "before_median_s": self.before_s, "after_median_s": self.after_s,
            "before_min_s": self.before_min_s, "after_min_s": self.after_min_s,
            "relative_noise": self.noise, "step_speedup": self.step_speedup,
            "cumulative_speedup": self.cumulative_speedup, "max_abs_err": self.max_abs_err,
        }.items() if v is not None}
        return out


# ============================================================================ program analysis
def _row_major_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def _access_text(tensor: str, index: tuple[A.Expr, ...]) -> str:
    from ..leir.printer import format_expr
    if not index:
        return tensor
    return f"{tensor}[{','.join(format_expr(e, compact=True) for e in index)}]"


def _stride(t: A.Tensor | None, index: tuple[A.Expr, ...], var: Optional[str]) -> Optional[int]:
    if t is None or var is None:
        return None
    if not index:
        return 0
    total = 0
    for sub, st in zip(index, _row_major_strides(t.shape)):
        a = affine(sub)
        if a is None:
            return None
        total += a[0].get(var, 0) * st
    return total


@functools.lru_cache(maxsize=256)
def program_facts(text: str) -> ProgramFacts:
    """Analyses of one LEIR program (cached by text)."""
    p = parse(text)
    an = Analysis(p)
    roles = {t.name: "input" for t in p.inputs}
    roles.update({t.name: "output" for t in p.outputs})
    tensors = {}
    for t in p.inputs + p.outputs + p.intermediates:
        tensors[t.name] = TensorFact(t.name, roles.get(t.name, "intermediate"), t.dtype, tuple(t.shape),
                                     t.size, t.size * ITEMSIZE[t.dtype])
    loops = tuple(LoopFact(li.loop.var, li.loop.extent, li.loop.kind, li.depth, li.path,
                           an.carries_dependence(li.path)) for li in an.loops)
    stmts = []
    for si in an.statements:
        inner = si.vars[-1] if si.vars else None
        accs = []
        seen = set()
        for a in an.accesses(si.path):
            text_ = _access_text(a.tensor, a.index)
            if (text_, a.write) in seen:
                continue
            seen.add((text_, a.write))
            accs.append(AccessFact(a.tensor, a.write, text_, _stride(p.tensors.get(a.tensor), a.index, inner)))
        line = format_stmt(si.stmt, 0, p).strip().splitlines()[-1].strip()
        stmts.append(StmtFact(si.path, line, si.stmt.tensor, si.stmt.op, si.vars, inner,
                              si.reduction_axes, si.domain.count, an.statement_flops(si.path),
                              tuple(accs)))
    foot: dict[str, int] = {}
    for fp_map in (an.reads(()), an.writes(())):
        for name, fp in fp_map.items():
            t = p.tensors.get(name)
            if t is None:
                continue
            foot[name] = max(foot.get(name, 0), fp.volume * ITEMSIZE[t.dtype])
    consts: dict[float, None] = {}
    for node in A.walk(p):
        if isinstance(node, A.Const) and node.kind in ("int", "float"):
            consts.setdefault(float(node.value), None)
    return ProgramFacts(p.name, tensors, loops, tuple(stmts), an.flops, an.bytes_moved,
                        an.arithmetic_intensity, foot, tuple(consts))


# ============================================================================ numbers
def _numbers(f: "Facts") -> dict[str, float]:
    n: dict[str, float] = {}

    def put(label: str, v: Any) -> None:
        if v is None or isinstance(v, bool):
            return
        if isinstance(v, (int, float)) and math.isfinite(v):
            n[label] = float(v)

    for side, pf in (("before", f.before), ("after", f.after)):
        if pf is None:
            continue
        for t in pf.tensors.values():
            for d, size in enumerate(t.shape):
                put(f"{side}.tensor.{t.name}.dim{d}", size)
            put(f"{side}.tensor.{t.name}.elements", t.elements)
            put(f"{side}.tensor.{t.name}.bytes", t.bytes)
            put(f"itemsize.{t.dtype}", ITEMSIZE[t.dtype])
            put(f"{side}.tensor.{t.name}.rank", len(t.shape))
        for lp in pf.loops:
            put(f"{side}.loop.{lp.var}@{'.'.join(map(str, lp.path))}.extent", lp.extent)
        for s in pf.statements:
            where = ".".join(map(str, s.path))
            put(f"{side}.stmt{where}.iterations", s.iterations)
            put(f"{side}.stmt{where}.flops", s.flops)
            put(f"{side}.stmt{where}.depth", len(s.loops))
            for a in s.accesses:
                put(f"{side}.stmt{where}.stride.{a.text}", a.stride)
                if a.stride is not None:
                    put(f"{side}.stmt{where}.stride_bytes.{a.text}",
                        a.stride * ITEMSIZE[pf.tensors[a.tensor].dtype] if a.tensor in pf.tensors else None)
        for name, b in pf.footprint_bytes.items():
            put(f"{side}.footprint.{name}.bytes", b)
        put(f"{side}.footprint.total.bytes", sum(pf.footprint_bytes.values()))
        put(f"{side}.flops", pf.flops)
        put(f"{side}.bytes_moved", pf.bytes_moved)
        put(f"{side}.arithmetic_intensity", pf.arithmetic_intensity)
        put(f"{side}.statements", len(pf.statements))
        put(f"{side}.loops", len(pf.loops))
    put("before.median_s", f.before_s)
    put("after.median_s", f.after_s)
    put("before.min_s", f.before_min_s)
    put("after.min_s", f.after_min_s)
    if f.before_s is not None and f.after_s is not None:
        put("saved_s", f.before_s - f.after_s)
    put("noise", f.noise)
    put("noise.pct", f.noise * 100)
    sp = f.step_speedup
    if sp is not None:
        put("step_speedup", sp)
        put("step_speedup.change_pct", (sp - 1) * 100)
        put("step_speedup.time_change_pct", (1 / sp - 1) * 100 if sp else None)
        put("step_speedup.inverse", 1 / sp if sp else None)
    put("cumulative_speedup", f.cumulative_speedup)
    put("max_abs_err", f.max_abs_err)

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}", x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{prefix}.{i}", x)
        else:
            put(prefix, v)

    walk("site", f.site)
    walk("params", f.params)
    for side, pf in (("before", f.before), ("after", f.after)):
        for k, c in enumerate(pf.constants if pf is not None else ()):
            put(f"{side}.const{k}", c)
    return n


def step_key(step: StepRecord) -> str:
    """A stable identity of a step (seeds, cache keys): never Python's salted ``hash``."""
    return canonical_json([step.trajectory_id, step.step_index, step.kernel_id, step.strategy,
                           step.site, step.params, step.before_leir, step.after_leir])


def facts(step: StepRecord) -> Facts:
    """Every citable fact of one step. Raises ValueError if the before-program does not parse."""
    before = program_facts(step.before_leir)
    after = None
    if step.after_leir.strip():
        try:
            after = program_facts(step.after_leir)
        except Exception:  # a failed step may carry no valid after-program
            after = None
    b, a = step.before, step.after
    noise = max([t.spread for t in (b, a) if t is not None] or [0.0])
    sp = step.step_speedup
    if sp is None and b is not None and a is not None and a.median_s > 0:
        sp = b.median_s / a.median_s
    f = Facts(step_key(step), before.name, step.strategy, step.family, step.exactness,
              dict(step.site), dict(step.params), step.target, step.outcome, before, after,
              b.median_s if b else None, a.median_s if a else None,
              b.min_s if b else None, a.min_s if a else None, noise, sp,
              step.cumulative_speedup, step.max_abs_err, step.before_leir, step.after_leir)
    object.__setattr__(f, "numbers", _numbers(f))
    return f


__all__ = ["Facts", "ProgramFacts", "TensorFact", "LoopFact", "StmtFact", "AccessFact", "facts",
           "program_facts", "step_key"]
