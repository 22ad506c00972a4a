"""The ground truth a step's reasoning may cite: ``facts(step, hardware)``.

Every writer (template, LLM), the validator and the claim checker use this one function, so a
number or claim in the reasoning is either one of these facts (within rounding) or an error.
What it holds is what could be known *before* the step was measured:

* program analyses of the before- and after-programs (loop extents, reduction axes, FLOPs, bytes
  moved, arithmetic intensity, the innermost stride of each access);
* for the step's *site* (:class:`SiteFacts`): the main statement's own loop nest, every access
  (reads and writes) with its stride along the innermost loop before and after the step (the
  after-innermost loop named by the before-loop it walks), each access's reuse loop and reuse
  distance, and the working set of every loop of the nest with the cache level of the
  fingerprinted CPU (:class:`Hardware`) that holds it — distinct elements, counted;
* the analytic cost model's estimates before and after (:class:`Prediction`), the other legal
  actions of the state ranked by it and the refusals that teach something
  (:mod:`steptp.cot.alternatives`), and the best finishing move after the step;
* the diagnosis of the before-program on that hardware (:func:`diagnose`), independent of the
  step that was applied.

The step's own measurement (after-time, speedup, error) is *not* citable: ``measured_numbers``
keeps it apart, for the fields stored beside the reasoning. ``Facts.numbers`` maps a label to a
value in base units (seconds, bytes, operations, elements); ``Facts.prompt()`` is the JSON-able
view an LLM is shown (no measurement of the step).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from ..leir import ast as A
from ..leir.analysis import ITEMSIZE, Analysis, affine, interval
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
    loops: tuple[str, ...]            # the statement's own enclosing loops, outermost first
    innermost: Optional[str]
    reduction_axes: tuple[str, ...]
    iterations: int
    flops: int
    accesses: tuple[AccessFact, ...]
    extents: tuple[int, ...] = ()     # extent of each of ``loops``
    kinds: tuple[str, ...] = ()       # kind of each of ``loops``
    is_reduction: bool = False

    @property
    def nest(self) -> tuple[tuple[str, int], ...]:
        return tuple(zip(self.loops, self.extents))


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
    seed_text: str                    # step_seed_text(step): what the writer's choices hash
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
    hardware: Optional["Hardware"] = None
    at_site: Optional["SiteFacts"] = None
    at_hot: Optional["SiteFacts"] = None      # the same facts for the diagnosis' statement
    predicted: Optional["Prediction"] = None
    diagnosis: Optional["Diagnosis"] = None
    alternatives: tuple = ()          # steptp.cot.alternatives.Alternative, best first
    refusals: tuple = ()              # steptp.cot.alternatives.Refusal that teach something
    follow_up: Any = None             # the best finishing move after the step (Alternative)
    staging: Optional[tuple] = None   # (intermediate, loop, extent, bytes per iteration) after
    numbers: dict[str, float] = field(default_factory=dict)

    @property
    def predicted_direction(self) -> Optional[str]:
        """faster / slower / neutral by the cost model's estimate of this step alone."""
        p = self.predicted
        if p is None or p.ratio is None:
            return None
        if p.ratio > 1 + PREDICT_TOL:
            return "faster"
        if p.ratio < 1 - PREDICT_TOL:
            return "slower"
        return "neutral"

    @property
    def prepares(self) -> bool:
        """The step is not predicted faster itself, but the best finishing move after it is
        predicted faster than the program before it, and faster than that move could do before
        the step (it enables something new)."""
        fu, p = self.follow_up, self.predicted
        if self.predicted_direction == "faster" or fu is None or p is None:
            return False
        if fu.predicted_s >= p.before_s * (1 - PREDICT_TOL):
            return False
        from .alternatives import alternatives
        kind = "gpu" if any(w in (self.target or "").lower() for w in ("cuda", "gpu", "nvptx", "rocm")) \
            else "cpu"
        cores = self.hardware.cores if self.hardware is not None else GENERIC.cores
        alts, _ = alternatives(self.before_text, kind, cores)
        before_best = min((a.predicted_s for a in alts if a.strategy == fu.strategy), default=None)
        return before_best is None or fu.predicted_s < before_best * (1 - PREDICT_TOL)

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
        if self.hardware is not None:
            out["hardware"] = self.hardware.to_dict()
        sf = self.at_site
        if sf is not None:
            out["site"] = {
                "statement": sf.main.text, "path": list(sf.main.path),
                "nest": [{"var": v, "extent": e} for v, e in sf.main.nest],
                "innermost_before": sf.main.innermost, "innermost_after": sf.innermost_after,
                "accesses": [{"access": a.text, "write": a.write, "stride_before": a.stride,
                              "stride_after": a.stride_after, "reuse_loop": a.reuse_loop,
                              "reuse_bytes": a.reuse_bytes, "line_loop": a.line_loop,
                              "line_apart": a.line_apart, "line_loop_after": a.line_loop_after,
                              "line_apart_after": a.line_apart_after} for a in sf.accesses],
                "working_sets": [{"loop": w.loop, "bytes": w.bytes, "level": w.level}
                                 for w in sf.working_sets],
            }
        from .argument import answered, preparation, site_findings

        def finding(x):
            return None if x is None else {"kind": x.kind, "loop": x.loop, "tensor": x.tensor,
                                           **x.detail}
        ans = answered(self)
        prep = preparation(self) if ans is None else None
        out["findings"] = {
            "at_site": [finding(x) for x in site_findings(self)],
            "answered": finding(ans),
            "prepares": None if prep is None else {
                "strategy": prep.strategy, "loops": list(prep.loops), "why": prep.why,
                "extent": prep.extent, "finding": finding(prep.finding)}}
        out["alternatives"] = [{"strategy": a.strategy, "site": a.site, "params": a.params}
                               for a in self.alternatives[:6]]
        out["refusals"] = [{"strategy": r.strategy, "site": r.site, "params": r.params,
                            "reason": r.reason} for r in self.refusals[:3]]
        # No measurement of the step: the reasoning must not know the outcome.
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


def _stride(t: A.Tensor | None, index: tuple[A.Expr, ...], var: Optional[str],
            nest: tuple[tuple[str, int], ...] = ()) -> Optional[int]:
    """Elements the access moves per iteration of ``var``: the affine coefficient, or for other
    subscripts (``//``, ``%``) the address difference when it is the same over the loop's whole
    range (the other loops at their first and second values); None when it is not (irregular)."""
    if t is None or var is None:
        return None
    if not index:
        return 0
    total = 0
    for sub, st in zip(index, _row_major_strides(t.shape)):
        a = affine(sub)
        if a is None:
            return _numeric_stride(t, index, var, nest)
        total += a[0].get(var, 0) * st
    return total


def _numeric_stride(t: A.Tensor, index: tuple[A.Expr, ...], var: str,
                    nest: tuple[tuple[str, int], ...]) -> Optional[int]:
    import numpy as np

    ext = dict(nest)
    n = ext.get(var)
    if n is None or n < 2 or n > 1 << 16:
        return None
    d = None
    for base in (0, 1):
        env = {v: np.asarray(min(base, e - 1), dtype=np.int64) for v, e in nest if v != var}
        env[var] = np.arange(n, dtype=np.int64)
        for v in _free(index):
            env.setdefault(v, np.asarray(0, dtype=np.int64))
        fl = _flat_index(t, index, env, mask=False)
        if fl is None:
            return None
        diffs = np.unique(np.diff(np.broadcast_to(fl, (n,))))
        if diffs.size != 1 or (d is not None and int(diffs[0]) != d):
            return None
        d = int(diffs[0])
    return d


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
            accs.append(AccessFact(a.tensor, a.write, text_,
                                   _stride(p.tensors.get(a.tensor), a.index, inner,
                                           tuple((lp.var, lp.extent) for lp in si.loops))))
        line = format_stmt(si.stmt, 0, p).strip().splitlines()[-1].strip()
        stmts.append(StmtFact(si.path, line, si.stmt.tensor, si.stmt.op, si.vars, inner,
                              si.reduction_axes, si.domain.count, an.statement_flops(si.path),
                              tuple(accs), tuple(lp.extent for lp in si.loops),
                              tuple(lp.kind for lp in si.loops), si.stmt.is_reduction))
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


# ============================================================================ hardware
LINE_BYTES = 64   # cache line of every x86-64 and ARMv8 server core this project targets


L3_PER_CORE = 8 << 20   # bytes of last-level cache per core a figure may plausibly claim


@dataclass(frozen=True)
class Hardware:
    """What the reasoning may say about the machine: the fingerprinted CPU's data caches, SIMD
    width and the cores the measurements used."""

    cpu: str
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    vector_bits: int
    cores: int
    line_bytes: int = LINE_BYTES

    def lanes(self, dtype: str) -> int:
        return max(1, self.vector_bits // (8 * ITEMSIZE.get(dtype, 4)))

    @property
    def l3_plausible(self) -> bool:
        """Whether the reported last-level cache is one these cores can count on: at most
        ``L3_PER_CORE`` per core. A VM often reports its host's whole L3 (480 MiB to two cores);
        reasoning that "fits in L3 (480 MiB)" never bites, so such a figure is not used."""
        return 0 < self.l3_bytes <= L3_PER_CORE * max(1, self.cores)

    def level(self, nbytes: int) -> str:
        """The smallest cache level that holds ``nbytes`` ("L1", "L2", "L3" or "DRAM"; L3 only
        when :attr:`l3_plausible`, else anything beyond L2 is "DRAM")."""
        levels = [("L1", self.l1_bytes), ("L2", self.l2_bytes)]
        if self.l3_plausible:
            levels.append(("L3", self.l3_bytes))
        for name, size in levels:
            if nbytes <= size:
                return name
        return "DRAM"

    def beyond(self) -> str:
        """How the reasoning names the level past the last usable cache."""
        return "L3" if self.l3_plausible else "L2"

    def beyond_bytes(self) -> int:
        return self.l3_bytes if self.l3_plausible else self.l2_bytes

    def size(self, level: str) -> int:
        return {"L1": self.l1_bytes, "L2": self.l2_bytes, "L3": self.l3_bytes}[level]

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "l1_bytes": self.l1_bytes, "l2_bytes": self.l2_bytes,
                "l3_bytes": self.l3_bytes, "vector_bits": self.vector_bits, "cores": self.cores,
                "line_bytes": self.line_bytes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Hardware":
        return cls(str(d["cpu"]), int(d["l1_bytes"]), int(d["l2_bytes"]), int(d["l3_bytes"]),
                   int(d["vector_bits"]), int(d["cores"]), int(d.get("line_bytes", LINE_BYTES)))

    @classmethod
    def current(cls, num_threads: Optional[int] = None) -> "Hardware":
        """This machine, as the measurement fingerprint sees it."""
        from ..measure.fingerprint import _cpuinfo, available_cores, cache_sizes, vector_bits

        c = cache_sizes()
        return cls(_cpuinfo()[0], c.get("L1", GENERIC.l1_bytes), c.get("L2", GENERIC.l2_bytes),
                   c.get("L3", GENERIC.l3_bytes), vector_bits(),
                   int(num_threads or available_cores()))


# The cost model's generic core (steptp.analysis.cost_model): the default where no machine is named,
# so tests and sample data do not depend on the machine they run on.
GENERIC = Hardware("generic x86-64 core (AVX-512)", 48 * 1024, 2 * 1024 * 1024, 16 * 1024 * 1024,
                   512, 2)


# ============================================================================ footprints
MAX_POINTS = 1 << 21   # larger iteration spaces get the bounding-box bound instead of a count


def _flat_index(t: A.Tensor, index: tuple[A.Expr, ...], env: dict[str, Any], mask: bool = True):
    """Row-major element number of ``t[index]`` at the points of ``env``, or None when a
    subscript is not a function of loop variables alone (a gather)."""
    import numpy as np

    from ..leir.analysis import _eval_np

    flat = np.zeros((), dtype=np.int64)
    inside = np.ones((), dtype=bool)
    for sub, st, dim in zip(index, _row_major_strides(tuple(t.shape)), t.shape):
        try:
            with np.errstate(all="ignore"):
                v = np.asarray(_eval_np(sub, env), dtype=np.int64)
        except (ValueError, KeyError, TypeError, ZeroDivisionError):
            return None
        flat = flat + v * st
        inside = inside & (v >= 0) & (v < dim)
    # an out-of-range subscript is never read (a `where` guards it): it touches nothing
    return np.where(inside, flat, -1) if mask else flat


def _grid(loops: list[tuple[str, int]]) -> dict[str, Any]:
    """Each loop variable as an integer array along its own axis (the loops' iteration space)."""
    import numpy as np

    env: dict[str, Any] = {}
    for d, (v, e) in enumerate(loops):
        sh = [1] * len(loops)
        sh[d] = e
        env[v] = np.arange(e, dtype=np.int64).reshape(sh)
    return env


def _guard_mask(env: dict[str, Any], shape: list[int], guards: tuple[A.Expr, ...]):
    """The points of ``env`` where every loop-only guard holds (None: a guard is not one)."""
    import numpy as np

    from ..leir.analysis import _eval_np

    try:
        full = {**env}
        for v in _free(guards):
            full.setdefault(v, np.zeros((), dtype=np.int64))
        m = np.ones(shape, dtype=bool)
        with np.errstate(all="ignore"):
            for g in guards:
                m &= np.broadcast_to(np.asarray(_eval_np(g, full), dtype=bool), m.shape)
        return m
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def _touched(t: A.Tensor, index: tuple[A.Expr, ...], env: dict[str, Any], shape: list[int], mask):
    """Row-major element numbers ``t[index]`` touches at the points of ``env`` (those of ``mask``
    when given; out-of-range subscripts touch nothing), or None for a gather."""
    import numpy as np

    full = {**env}
    for sub in index:
        for v in A.free_vars(sub):
            full.setdefault(v, np.zeros((), dtype=np.int64))
    fl = _flat_index(t, index, full)
    if fl is None:
        return None
    fl = np.broadcast_to(fl, shape) if shape else fl.reshape(())
    fl = fl[mask] if mask is not None else fl.reshape(-1)
    return fl[fl >= 0]


def distinct_bytes(program: A.Program, accesses: list[tuple[str, tuple[A.Expr, ...]]],
                   loops: list[tuple[str, int]], guards: tuple[A.Expr, ...] = ()) -> tuple[int, bool]:
    """Bytes of the distinct elements ``accesses`` touch (see :func:`element_counts`)."""
    b, _, exact = element_counts(program, accesses, loops, guards)
    return b, exact


def element_counts(program: A.Program, accesses: list[tuple[str, tuple[A.Expr, ...]]],
                   loops: list[tuple[str, int]], guards: tuple[A.Expr, ...] = ()
                   ) -> tuple[int, Optional[int], bool]:
    """Bytes of the distinct elements that ``accesses`` touch while ``loops`` (var, extent) run
    through their ranges (every other loop variable fixed at 0), honouring loop-only guards.
    Returns (distinct bytes, touched bytes, exact): touched counts every (access, point) once per
    distinct access text, in-range subscripts only; inexact when the space is too large or a
    subscript is a gather (then the bounding box, or the whole tensor, bounds the distinct bytes
    from above and the touched bytes are None)."""
    import numpy as np

    n = math.prod(e for _, e in loops) if loops else 1
    shape = [e for _, e in loops]
    env = _grid(loops) if n <= MAX_POINTS else {}
    mask = _guard_mask(env, shape, guards) if n <= MAX_POINTS and guards else None
    total, touched, exact = 0, 0, n <= MAX_POINTS
    by_tensor: dict[str, list] = {}
    texts: set = set()
    for name, index in accesses:
        if (name, _access_text(name, index)) in texts:
            continue          # a reduction's read and write of its target: one access
        texts.add((name, _access_text(name, index)))
        by_tensor.setdefault(name, []).append(index)
    for name, indices in by_tensor.items():
        t = program.tensors.get(name)
        if t is None:
            continue
        isz = ITEMSIZE[t.dtype]
        flats = None
        if n <= MAX_POINTS:
            flats = []
            for index in indices:
                fl = _touched(t, index, env, shape, mask)
                if fl is None:
                    flats = None
                    break
                flats.append(fl)
        if flats is not None:
            # element numbers lie in [0, t.size): a bitmap counts the distinct ones in linear
            # time (np.unique sorts: it took 96 of 110 s of one trajectory's reasoning)
            seen = np.zeros(max(int(t.size), 1), dtype=bool)
            for f in flats:
                seen[f.reshape(-1)] = True
            total += int(np.count_nonzero(seen)) * isz
            touched += sum(int(f.size) for f in flats) * isz
            continue
        exact = False
        ranges = {v: (0, e - 1) for v, e in loops}
        vol = 0
        for index in indices:
            box = 1
            for sub, dim in zip(index, t.shape):
                free = A.free_vars(sub)
                r = {v: ranges.get(v, (0, 0)) for v in free}
                iv = interval(sub, r)
                box *= dim if iv is None else min(dim, iv[1] - iv[0] + 1)
            vol += box
        total += min(vol, t.size) * isz
    return total, (touched if exact else None), exact


def distinct_lines(program: A.Program, accesses: list[tuple[str, tuple[A.Expr, ...]]],
                   loops: list[tuple[str, int]], line_bytes: int,
                   guards: tuple[A.Expr, ...] = ()) -> Optional[int]:
    """Cache lines of ``line_bytes`` that ``accesses`` touch while ``loops`` run (every other
    loop at 0; each tensor starting on a line boundary, as TVM allocates), or None when the
    space is too large to count or a subscript is a gather."""
    import numpy as np

    n = math.prod(e for _, e in loops) if loops else 1
    if n > MAX_POINTS:
        return None
    shape = [e for _, e in loops]
    env = _grid(loops)
    mask = _guard_mask(env, shape, guards) if guards else None
    if guards and mask is None:
        return None
    lines: dict[str, Any] = {}
    for name, index in accesses:
        t = program.tensors.get(name)
        if t is None:
            continue
        fl = _touched(t, index, env, shape, mask)
        if fl is None:
            return None
        fl = fl * ITEMSIZE[t.dtype] // line_bytes
        lines[name] = fl if name not in lines else np.concatenate([lines[name], fl])
    return sum(int(np.unique(v).size) for v in lines.values())


def line_return(program: A.Program, accesses: list[tuple[str, tuple[A.Expr, ...]]],
                access: tuple[str, tuple[A.Expr, ...]], nest: list[tuple[str, int]],
                line_bytes: int, guards: tuple[A.Expr, ...] = ()
                ) -> tuple[Optional[str], Optional[int]]:
    """For ``access`` taking a new line every iteration of the innermost loop of ``nest``: the
    innermost outer loop along which it moves by less than a line (its next iteration reads
    the next element of the same line) and the bytes of the lines all ``accesses`` touch
    during one iteration of that loop (what passes through the cache before the line is
    needed again). (None, None) when the walk does not take a new line each iteration, no
    loop brings it back, or the lines are too many to count."""
    name, index = access
    t = program.tensors.get(name)
    if t is None or len(nest) < 2:
        return None, None
    isz = ITEMSIZE[t.dtype]
    inner = _stride(t, index, nest[-1][0], tuple(nest))
    if inner is None or abs(inner) * isz < line_bytes:
        return None, None
    for d in range(len(nest) - 2, -1, -1):
        v, e = nest[d]
        if e < 2:
            continue
        st = _stride(t, index, v, tuple(nest))
        if st is None:
            return None, None
        if st == 0 or abs(st) * isz >= line_bytes:
            continue
        n = distinct_lines(program, accesses, nest[d + 1:], line_bytes, guards)
        return (v, n * line_bytes) if n is not None else (None, None)
    return None, None


def _free(exprs) -> list[str]:
    out: dict[str, None] = {}
    for e in exprs:
        for v in A.free_vars(e):
            out.setdefault(v, None)
    return list(out)


# ============================================================================ the site
@dataclass(frozen=True)
class SiteAccess:
    """One access of the site's main statement: its stride along the innermost loop before the
    step and (for the matching statement) after it, and its reuse."""

    tensor: str
    write: bool
    text: str
    stride: Optional[int]             # along the innermost loop before the step (elements)
    stride_after: Optional[int]       # along the innermost loop of the matching statement after
    text_after: Optional[str]
    reuse_loop: Optional[str]         # innermost loop along which the access is invariant
    reuse_bytes: Optional[int]        # distinct bytes the statement touches between two reuses
    stride_bytes: Optional[int] = None
    reuse_bytes_after: Optional[int] = None   # the same distance after the step (None: no reuse)
    # a walk that takes a new cache line every innermost iteration: the loop whose next
    # iteration reads the next element of the same line, and the bytes of lines the statement
    # touches in between (before and after the step; None: no such loop, or too large to count)
    line_loop: Optional[str] = None
    line_apart: Optional[int] = None
    line_loop_after: Optional[str] = None
    line_apart_after: Optional[int] = None


@dataclass(frozen=True)
class WorkingSet:
    """Distinct bytes the site's main statement touches during one full run of ``loop`` (the
    loops outside it fixed), and the smallest cache level of the hardware that holds them."""

    loop: str
    depth: int
    extent: int
    bytes: int
    level: str
    exact: bool


@dataclass(frozen=True)
class SiteFacts:
    path: tuple[int, ...]
    loop: Optional[str]               # the loop variable at ``path`` (None for a statement)
    statements: tuple[StmtFact, ...]  # every assignment at or below the site, before the step
    main: StmtFact                    # the heaviest of them (by operations)
    main_after: Optional[StmtFact]    # the statement writing the same tensor after the step
    accesses: tuple[SiteAccess, ...]
    working_sets: tuple[WorkingSet, ...]
    innermost_origin: Optional[str] = None   # the before-loop the after-innermost loop walks
    accessed_bytes: int = 0                 # bytes the distinct accesses move over the whole nest
    touched_once: bool = False              # no element is touched by two (access, iteration)s
    # the main statement's most repeated computed subexpression: (text, operations in one
    # evaluation, occurrences before, occurrences in the matching statement after; None: none)
    repeated: Optional[tuple[str, int, int, Optional[int]]] = None
    # the main statement's costly operations per iteration, before and in the matching statement
    # after the step, and the whole programs' (None: the statement has no costly operation)
    work: Optional["Work"] = None

    @property
    def innermost_after(self) -> Optional[str]:
        """The innermost loop of the main statement after the step, in the *before*-program's
        names (a split's new ``j_i`` walks the before-program's ``j``)."""
        return self.innermost_origin


#: operations that cost far more than an add or a multiply on a CPU core (a math-library call or
#: a divider that is not pipelined like the multiplier), by how the text names them
COSTLY_CALLS = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos",
                          "log2", "exp2", "log1p", "pow"})


@dataclass(frozen=True)
class Work:
    """The costly operations of a statement per iteration (``costly``: (name, count) pairs,
    names like ``log`` or ``division``, sorted) and all its operations, before the step and in
    the matching statement after it (None after: no matching statement); and the costly
    operations and all operations the whole program evaluates, before and after (``total*``),
    so that a rewrite that only moves a costly operation into another statement saves none."""

    costly: tuple[tuple[str, int], ...]
    ops: int
    costly_after: Optional[tuple[tuple[str, int], ...]] = None
    ops_after: Optional[int] = None
    total: tuple[int, int] = (0, 0)                    # (costly, all) evaluations, the program
    total_after: Optional[tuple[int, int]] = None

    @property
    def n_costly(self) -> int:
        return sum(c for _, c in self.costly)

    @property
    def n_costly_after(self) -> Optional[int]:
        return None if self.costly_after is None else sum(c for _, c in self.costly_after)

    @property
    def less(self) -> bool:
        """Fewer costly operations per iteration after the step (or as many and fewer in all),
        in the statement and in the whole program."""
        if self.costly_after is None or self.ops_after is None or self.total_after is None:
            return False
        return (self.n_costly_after, self.ops_after) < (self.n_costly, self.ops) \
            and self.total_after < self.total


def costly_ops(value: A.Expr) -> tuple[tuple[str, int], ...]:
    """The costly operations of a value expression (:data:`COSTLY_CALLS`, float division, and a
    power whose exponent is not a small whole number: ``x ** 2`` is a multiply), as sorted
    (name, count) pairs."""
    counts: dict[str, int] = {}

    def small_whole(e: A.Expr) -> bool:
        return isinstance(e, A.Const) and e.kind in ("int", "float") and \
            float(e.value).is_integer() and abs(e.value) <= 4

    def walk(e: A.Expr) -> None:
        if isinstance(e, A.Call):
            if e.func in COSTLY_CALLS and not (e.func == "pow" and small_whole(e.args[1])):
                counts[e.func] = counts.get(e.func, 0) + 1
            for a in e.args:
                walk(a)
        elif isinstance(e, A.Binary):
            if e.op == "/" or (e.op == "**" and not small_whole(e.rhs)):
                name = "division" if e.op == "/" else "pow"
                counts[name] = counts.get(name, 0) + 1
            walk(e.lhs)
            walk(e.rhs)
        elif isinstance(e, A.Unary):
            walk(e.operand)

    walk(value)
    return tuple(sorted(counts.items()))


def program_work(prog: A.Program, facts_: "ProgramFacts") -> tuple[int, int]:
    """(costly operations, all operations) the whole program evaluates."""
    n = 0
    for s in facts_.statements:
        st = A.node_at(prog, s.path)
        if isinstance(st, A.Assign):
            n += sum(c for _, c in costly_ops(st.value)) * s.iterations
    return n, facts_.flops


def statement_work(before: A.Expr, after: Optional[A.Expr], total: tuple[int, int] = (0, 0),
                   total_after: Optional[tuple[int, int]] = None) -> Optional[Work]:
    """The :class:`Work` of a statement whose value is ``before`` (``after``: the matching
    statement's value after the step; ``total``/``total_after``: :func:`program_work`), or
    None when it has no costly operation."""
    from ..leir.analysis import _count_ops

    c = costly_ops(before)
    if not c:
        return None
    if after is None:
        return Work(c, _count_ops(before), total=total)
    return Work(c, _count_ops(before), costly_ops(after), _count_ops(after), total, total_after)


def repeated_subexpression(value: A.Expr, after: Optional[A.Expr] = None
                           ) -> Optional[tuple[str, int, int, Optional[int]]]:
    """The computed subexpression of ``value`` (one with at least one operation, as the
    statement's flops count them) that occurs most often, at least twice (ties: the larger, then
    the last in text order), as (text, operations per evaluation, occurrences, its occurrences
    in ``after``), or None."""
    from ..leir.analysis import _count_ops
    from ..leir.printer import format_expr
    from ..strategies.graph import value_nodes

    whole = format_expr(value)
    counts: dict[str, int] = {}
    size: dict[str, int] = {}
    for n in value_nodes(value):
        ops = _count_ops(n)
        if ops == 0:
            continue      # a load, a constant or a cast: nothing to save
        t = format_expr(n)
        counts[t] = counts.get(t, 0) + 1
        size[t] = ops
    rep = [t for t, c in counts.items() if c >= 2 and t != whole]
    if not rep:
        return None
    t = max(rep, key=lambda x: (counts[x], size[x], x))
    n_after = None if after is None else sum(1 for n in value_nodes(after) if format_expr(n) == t)
    return t, size[t], counts[t], n_after


def _moves(prog: A.Program, tensor: str, index: tuple[A.Expr, ...], var: str,
           nest: list[tuple[str, int]]) -> bool:
    """Whether the element ``tensor[index]`` changes as ``var`` runs (the other loops at their
    first and second values): by the affine form when there is one, else by evaluation (so
    ``A[j%1]`` does not move with ``j``)."""
    import numpy as np

    if var not in _free(index):
        return False
    t = prog.tensors.get(tensor)
    forms = [affine(e) for e in index]
    if t is not None and all(fm is not None for fm in forms):
        return sum(fm[0].get(var, 0) * st for fm, st in zip(forms, _row_major_strides(tuple(t.shape)))) != 0
    ext = dict(nest)
    if t is None:
        return True
    for base in (0, 1):
        env = {v: np.asarray(min(base, e - 1), dtype=np.int64) for v, e in nest if v != var}
        env[var] = np.arange(ext.get(var, 1), dtype=np.int64)
        for v in _free(index):
            env.setdefault(v, np.asarray(0, dtype=np.int64))
        fl = _flat_index(t, index, env)
        if fl is None:
            return True
        if np.unique(np.asarray(fl).reshape(-1)).size > 1:
            return True
    return False


def _matching(after: "ProgramFacts", s: StmtFact, before: "ProgramFacts") -> Optional[StmtFact]:
    """The statement of the after-program that plays ``s``'s role: the same written tensor and
    the same rank among the statements writing it."""
    rank = [x.path for x in before.statements if x.tensor == s.tensor].index(s.path)
    cands = [x for x in after.statements if x.tensor == s.tensor]
    if not cands:
        return None
    # a reduction split into partial results keeps the reduction over the original tensor last
    return cands[rank] if rank < len(cands) and len(cands) == sum(
        1 for x in before.statements if x.tensor == s.tensor) else max(cands, key=lambda x: x.flops)


def site_facts(before_text: str, after_text: str, site: dict[str, Any], hw: Hardware) -> SiteFacts:
    bp = parse(before_text)
    an = Analysis(bp)
    before = program_facts(before_text)
    after = None
    if after_text.strip():
        try:
            after = program_facts(after_text)
        except Exception:  # noqa: BLE001 - a failed step may carry no valid after-program
            after = None
    path = tuple(int(x) for x in (site.get("path") or ()))
    try:
        node = an.node(path) if path else None
    except KeyError:
        node = None
    under = [s for s in before.statements if s.path[:len(path)] == path] if node is not None else []
    if not under:
        under = list(before.statements)
    main = max(under, key=lambda s: (s.flops, len(s.loops)))
    main_after = _matching(after, main, before) if after is not None else None
    si = an.statement(main.path)
    raw = []
    seen = set()
    for a in an.accesses(main.path):
        key = (_access_text(a.tensor, a.index), a.write)
        if key not in seen:
            seen.add(key)
            raw.append(a)
    after_accs: list = []
    ap = aan = asi = None
    if main_after is not None:
        ap = parse(after_text)
        aan = Analysis(ap)
        seen2 = set()
        for a in aan.accesses(main_after.path):
            key = (_access_text(a.tensor, a.index), a.write)
            if key not in seen2:
                seen2.add(key)
                after_accs.append(a)
    nest = [(lp.var, lp.extent) for lp in si.loops]
    all_idx = [(a.tensor, a.index) for a in raw]
    wsets = []
    for d, (v, e) in enumerate(nest):
        b, ex = distinct_bytes(bp, all_idx, nest[d:], si.guards)
        wsets.append(WorkingSet(v, d, e, b, hw.level(b), ex))
    accs = []
    origin: Optional[str] = None
    if main_after is not None and main_after.innermost is not None:
        cands: Optional[set] = None
        for a in raw:
            same = [x for x in after_accs if x.tensor == a.tensor and x.write == a.write]
            mine = [x for x in raw if x.tensor == a.tensor and x.write == a.write]
            if len(same) != len(mine):
                continue
            m = same[mine.index(a)]
            for sb, sa_ in zip(a.index, m.index):
                if main_after.innermost in A.free_vars(sa_):
                    vs = set(A.free_vars(sb))
                    cands = vs if cands is None else cands & vs
        if cands is not None and len(cands) == 1:
            origin = next(iter(cands))
        elif cands is None and main_after.innermost in {v for v, _ in nest}:
            origin = main_after.innermost   # the innermost loop touches no subscript: same name
    # reuse after the step: the same analysis on the matching statement of the after-program
    reuse_after: dict[int, Optional[int]] = {}
    nest_a: list[tuple[str, int]] = []
    idx_a: list[tuple[str, tuple[A.Expr, ...]]] = []
    if main_after is not None:
        asi = aan.statement(main_after.path)
        nest_a = [(lp.var, lp.extent) for lp in asi.loops]
        idx_a = [(x.tensor, x.index) for x in after_accs]
        ws_a: dict[int, int] = {}

        def ws_after(d: int) -> int:
            if d not in ws_a:
                ws_a[d] = distinct_bytes(ap, idx_a, nest_a[d:], asi.guards)[0] if d < len(nest_a) else 0
            return ws_a[d]
        for k, a in enumerate(raw):
            same = [x for x in after_accs if x.tensor == a.tensor and x.write == a.write]
            mine = [x for x in raw if x.tensor == a.tensor and x.write == a.write]
            if len(same) != len(mine):
                continue
            m = same[mine.index(a)]
            reuse_after[k] = None
            for d in range(len(nest_a) - 1, -1, -1):
                if nest_a[d][1] > 1 and not _moves(ap, m.tensor, m.index, nest_a[d][0], nest_a):
                    reuse_after[k] = ws_after(d + 1)
                    break
    for k, a in enumerate(raw):
        text_ = _access_text(a.tensor, a.index)
        t = bp.tensors.get(a.tensor)
        stride = _stride(t, a.index, main.innermost, tuple(nest))
        sa, ta, m = None, None, None
        if main_after is not None:
            same = [x for x in after_accs if x.tensor == a.tensor and x.write == a.write]
            mine = [x for x in raw if x.tensor == a.tensor and x.write == a.write]
            if len(same) == len(mine):
                m = same[mine.index(a)]
                ta = _access_text(m.tensor, m.index)
                sa = _stride(ap.tensors.get(m.tensor), m.index, main_after.innermost,
                             tuple(main_after.nest))
        reuse_loop, reuse_bytes = None, None
        for d in range(len(nest) - 1, -1, -1):
            # a one-iteration loop has nothing to reuse across
            if nest[d][1] > 1 and not _moves(bp, a.tensor, a.index, nest[d][0], nest):
                reuse_loop = nest[d][0]
                reuse_bytes = wsets[d + 1].bytes if d + 1 < len(wsets) else 0
                break
        sb = stride * ITEMSIZE[t.dtype] if (stride is not None and t is not None) else None
        ll, lb = line_return(bp, all_idx, (a.tensor, a.index), nest, hw.line_bytes, si.guards)
        lla, lba = (line_return(ap, idx_a, (m.tensor, m.index), nest_a, hw.line_bytes, asi.guards)
                    if ll is not None and m is not None else (None, None))
        accs.append(SiteAccess(a.tensor, a.write, text_, stride, sa, ta, reuse_loop, reuse_bytes, sb,
                               reuse_after.get(k), ll, lb, lla, lba))
    loop = node.var if isinstance(node, A.Loop) else None
    accessed, once = 0, False
    if nest:
        b0, touched, ex = element_counts(bp, all_idx, nest, si.guards)
        accessed = touched or 0
        once = bool(ex and touched is not None and b0 == touched)
    rep = work = None
    st_b = A.node_at(bp, main.path)
    if isinstance(st_b, A.Assign):
        st_a = A.node_at(ap, main_after.path) if ap is not None else None
        val_a = st_a.value if isinstance(st_a, A.Assign) else None
        rep = repeated_subexpression(st_b.value, val_a)
        if costly_ops(st_b.value):
            work = statement_work(st_b.value, val_a, program_work(bp, before),
                                  program_work(ap, after) if ap is not None else None)
    return SiteFacts(path, loop, tuple(under), main, main_after, tuple(accs), tuple(wsets), origin,
                     accessed, once, rep, work)


def staging(after_text: str, tensor: Optional[str] = None) -> Optional[tuple[str, str, int, int]]:
    """(intermediate, loop, extent, bytes per iteration) of the innermost loop of the
    after-program that both produces and consumes an intermediate (compute_at, fusion), if any;
    with ``tensor`` (the step's own intermediate), only that one: another intermediate staged
    long before (a reduction's partial sums) says nothing about what the step changed."""
    if not after_text.strip():
        return None
    prog = parse(after_text)
    an = Analysis(prog)
    mids = [t.name for t in prog.intermediates if tensor is None or t.name == tensor]
    best = None
    for li in an.loops:
        under = an.statements_under(li.path)
        for t in mids:
            w = [s for s in under if s.stmt.tensor == t]
            r = [s for s in under if any(ld.tensor == t for ld in A.loads(s.stmt.value))]
            if w and r and (best is None or li.depth > best[0].depth):
                best = (li, t, w, r)
    if best is None:
        return None
    li, t, w, r = best
    depth = li.depth + 1
    idx = [(t, s.stmt.index) for s in w] + [(t, ld.index) for s in r for ld in A.loads(s.stmt.value)
                                           if ld.tensor == t]
    inner: dict[str, int] = {}
    for s in w + r:
        for lp in s.loops[depth:]:
            inner.setdefault(lp.var, lp.extent)
    b, _ = distinct_bytes(prog, idx, list(inner.items()))
    return t, li.loop.var, li.loop.extent, b


# ============================================================================ cost model
@dataclass(frozen=True)
class Prediction:
    """The analytic cost model's view (steptp.analysis.cost_model), known before measuring."""

    before_s: float
    after_s: Optional[float]
    before_potential_s: float
    after_potential_s: Optional[float]

    @property
    def ratio(self) -> Optional[float]:
        return self.before_s / self.after_s if self.after_s else None


PREDICT_TOL = 0.05
LOW_INTENSITY = 1.0   # operations per byte below which the accesses, not the arithmetic, bound it   # relative change the cost model must predict to call a step faster/slower


@functools.lru_cache(maxsize=512)
def _predict(text: str, cores: int) -> tuple[float, float]:
    from ..analysis import cost_model as CM

    p = parse(text)
    pred = CM.predict(p, cores=cores)
    return pred, CM.potential(p, cores=cores, predicted=pred)


def prediction(before_text: str, after_text: str, hw: Hardware) -> Prediction:
    b, bp = _predict(before_text, hw.cores)
    a = ap = None
    if after_text.strip():
        try:
            a, ap = _predict(after_text, hw.cores)
        except Exception:  # noqa: BLE001 - an after-program that does not parse has no estimate
            a = ap = None
    return Prediction(b, a, bp, ap)


# ============================================================================ diagnosis
@dataclass(frozen=True)
class Diagnosis:
    """What limits the before-program on this hardware, found from the program alone (never
    from the step that was applied): the kind, the statement, loop and tensor it is about."""

    kind: str
    loop: Optional[str]
    tensor: Optional[str]
    stmt_path: tuple[int, ...]
    detail: dict[str, Any]


def _best(alts, strategy: str, before_s: float):
    """The best-predicted alternative of ``strategy`` if the cost model predicts it faster."""
    xs = [a for a in alts if a.strategy == strategy and a.predicted_s < before_s * (1 - PREDICT_TOL)]
    return min(xs, key=lambda a: a.predicted_s, default=None)


def diagnose(pf: ProgramFacts, text: str, hw: Hardware, alts: tuple = (),
             before_s: Optional[float] = None) -> Diagnosis:
    """Rules in a fixed order over the program's heaviest statement:

    1. an access with a non-unit stride along the innermost loop (a new cache line per
       iteration when the stride is at least a line) — locality;
    2. no parallel loop although the statement's outermost loop of more than one iteration
       carries no dependence and has at least as many iterations as cores, and the cost model
       predicts a parallel loop faster — parallelism;
    3. a scalar innermost loop with unit/zero strides, not a reduction axis, at least one vector
       wide, and the cost model predicts vector code faster — vectorization (when 2 and 3 both
       hold, the one whose remedy is predicted faster);
    4. the innermost loop carries a dependence other than a reduction (a scan: each iteration
       reads what the previous one wrote), or it is the reduction axis (one serial chain of
       updates) — dependence;
    5. a working set larger than L2, or under one operation per byte (loads and stores set the
       pace even from cache) — memory; else a short innermost loop (< 8) — loop overhead; else
       compute.
    """
    hot = pf.hot_statement
    an = Analysis(parse(text))
    si = an.statement(hot.path)
    lanes = hw.lanes(pf.tensors[hot.tensor].dtype) if hot.tensor in pf.tensors else 1
    inner = si.loops[-1] if si.loops else None
    if inner is not None:
        for a in hot.accesses:
            if a.stride is not None and abs(a.stride) > 1:
                isz = ITEMSIZE[pf.tensors[a.tensor].dtype]
                return Diagnosis("locality", inner.var, a.tensor, hot.path,
                                 {"access": a.text, "stride": a.stride,
                                  "stride_bytes": abs(a.stride) * isz,
                                  "new_line": abs(a.stride) * isz >= hw.line_bytes})
    found: list[Diagnosis] = []
    any_parallel = any(lp.kind in ("parallel",) or lp.kind.startswith(("blockIdx", "threadIdx"))
                       for lp in pf.loops)
    if si.loops and not any_parallel and hw.cores > 1:
        # a leading loop of one iteration (a batch of 1) is no place for threads: the outer loop
        # that matters is the first one with more (max_pool2d's `i` 1 above `j` 64 read as "no
        # parallel loop fits", and the 3-tap window's chain became the bottleneck)
        first = next((n for n, lp in enumerate(si.loops) if lp.extent > 1), 0)
        outer_path = si.loop_paths[first]
        lp0 = si.loops[first]
        best = _best(alts, "loop_parallelization", before_s) if before_s else None
        if lp0.kind == "serial" and lp0.extent >= hw.cores and not an.carries_dependence(outer_path) \
                and best is not None:
            found.append(Diagnosis("parallelism", lp0.var, None, hot.path,
                                   {"extent": lp0.extent, "cores": hw.cores,
                                    "predicted_s": best.predicted_s}))
    best = _best(alts, "loop_vectorization", before_s) if before_s else None
    if inner is not None and inner.kind in ("serial", "unrolled") \
            and inner.var not in hot.reduction_axes and inner.extent >= lanes \
            and all(a.stride is not None and abs(a.stride) <= 1 for a in hot.accesses) \
            and best is not None:
        found.append(Diagnosis("vectorization", inner.var, None, hot.path,
                               {"extent": inner.extent, "lanes": lanes,
                                "predicted_s": best.predicted_s}))
    if found:
        # both apply: the main limiter is the one whose remedy the cost model predicts faster
        # (a "serial code" heading over a vector step the prediction prefers reads as a non
        # sequitur); ties keep the rule order
        return min(found, key=lambda d: d.detail["predicted_s"])
    if inner is not None and inner.kind != "vectorized":
        carried = [c for c in an.loop_carried(si.loop_paths[-1]) if not c.reduction]
        if carried:
            c = carried[0]
            return Diagnosis("dependence", inner.var, c.tensor, hot.path,
                             {"extent": inner.extent, "scan": True})
    if inner is not None and inner.var in hot.reduction_axes and inner.kind != "vectorized":
        return Diagnosis("dependence", inner.var, hot.tensor, hot.path,
                         {"extent": inner.extent})
    total = sum(pf.footprint_bytes.values())
    if total > hw.l2_bytes or pf.arithmetic_intensity < LOW_INTENSITY:
        return Diagnosis("memory", None, None, hot.path,
                         {"bytes": total, "level": hw.level(total),
                          "intensity": pf.arithmetic_intensity})
    if inner is not None and inner.extent < 8 and inner.kind == "serial":
        return Diagnosis("loop_overhead", inner.var, None, hot.path, {"extent": inner.extent})
    return Diagnosis("compute", None, None, hot.path,
                     {"intensity": pf.arithmetic_intensity})


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
    # The before-program's own timing was known before the step; the step's measurement (after
    # time, speedup, error) was not, so it is not citable (see ``measured_numbers``).
    put("before.median_s", f.before_s)
    put("before.min_s", f.before_min_s)

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}", x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{prefix}.{i}", x)
        else:
            put(prefix, v)

    hw = f.hardware
    if hw is not None:
        put("hw.l1_bytes", hw.l1_bytes)
        put("hw.l2_bytes", hw.l2_bytes)
        put("hw.l3_bytes", hw.l3_bytes)
        put("hw.vector_bits", hw.vector_bits)
        put("hw.cores", hw.cores)
        put("hw.line_bytes", hw.line_bytes)
        for dt in sorted({t.dtype for t in f.before.tensors.values()}):
            put(f"hw.lanes.{dt}", hw.lanes(dt))
            # elements of one cache line: what a unit-stride walk uses of each line it fetches
            put(f"derived.per_line.{dt}", hw.line_bytes // ITEMSIZE[dt])
    for sf in (f.at_site, f.at_hot):
        if sf is None:
            continue
        where = ".".join(map(str, sf.main.path))
        for k, (v, e) in enumerate(sf.main.nest):
            put(f"site.nest.{k}.{v}", e)
        for a in sf.accesses:
            put(f"site{where}.stride.{a.text}", a.stride)
            put(f"site{where}.stride_bytes.{a.text}", a.stride_bytes)
            if hw is not None and a.stride_bytes:
                put(f"derived.per_line.{a.text}", max(1, hw.line_bytes // abs(a.stride_bytes)))
            put(f"site{where}.stride_after.{a.text}", a.stride_after)
            put(f"site{where}.reuse_bytes.{a.text}", a.reuse_bytes)
            put(f"site{where}.reuse_bytes_after.{a.text}", a.reuse_bytes_after)
            put(f"site{where}.line_apart.{a.text}", a.line_apart)
            put(f"site{where}.line_apart_after.{a.text}", a.line_apart_after)
        where = ".".join(map(str, sf.main.path))
        for w in sf.working_sets:
            put(f"site{where}.ws.{w.loop}.bytes", w.bytes)
        if sf.repeated is not None:
            _, ops, times, after = sf.repeated
            put(f"site{where}.repeated.ops", ops)
            put(f"site{where}.repeated.times", times)
            put(f"site{where}.repeated.saved_ops", (times - 1) * ops)
            put(f"site{where}.repeated.times_after", after)
        if sf.work is not None:
            w = sf.work
            put(f"site{where}.work.costly", w.n_costly)
            put(f"site{where}.work.ops", w.ops)
            for name, c in w.costly:
                put(f"site{where}.work.{name}", c)
                put(f"site{where}.work.{name}.total", c * sf.main.iterations)
            if w.costly_after is not None:
                put(f"site{where}.work.costly_after", w.n_costly_after)
                put(f"site{where}.work.ops_after", w.ops_after)
                put(f"site{where}.work.saved", w.n_costly - w.n_costly_after)
                put(f"site{where}.work.saved_ops", w.ops - w.ops_after)
                for name, c in w.costly_after:
                    put(f"site{where}.work_after.{name}", c)
        put("site.iterations", sf.main.iterations)
        put(f"site{where}.accessed_bytes", sf.accessed_bytes)
        if sf.main_after is not None:
            for k, (v, e) in enumerate(sf.main_after.nest):
                put(f"site.after_nest.{k}.{v}", e)
    pr = f.predicted
    if pr is not None:
        put("pred.before_s", pr.before_s)
        put("pred.after_s", pr.after_s)
        put("pred.before_potential_s", pr.before_potential_s)
        put("pred.after_potential_s", pr.after_potential_s)
        if pr.ratio:
            put("pred.ratio", pr.ratio)
            put("pred.inverse", 1 / pr.ratio)
            put("pred.change_pct", abs(1 / pr.ratio - 1) * 100)
    dg = f.diagnosis
    if dg is not None:
        walk("diag", dg.detail)
    for k, alt in enumerate(f.alternatives):
        put(f"alt{k}.predicted_s", alt.predicted_s)
        put(f"alt{k}.potential_s", alt.potential_s)
        walk(f"alt{k}.params", alt.params)
    if f.staging is not None:
        put("staging.extent", f.staging[2])
        put("staging.bytes", f.staging[3])
    if f.follow_up is not None:
        put("follow_up.predicted_s", f.follow_up.predicted_s)
        walk("follow_up.params", f.follow_up.params)
    walk("site", f.site)
    walk("params", f.params)
    for side, pf in (("before", f.before), ("after", f.after)):
        for k, c in enumerate(pf.constants if pf is not None else ()):
            put(f"{side}.const{k}", c)
    return n


def measured_numbers(f: "Facts") -> dict[str, float]:
    """What the step's measurement found: stored beside the reasoning, never cited in it."""
    n: dict[str, float] = {}
    for k, v in (("after.median_s", f.after_s), ("after.min_s", f.after_min_s),
                 ("noise", f.noise), ("step_speedup", f.step_speedup),
                 ("cumulative_speedup", f.cumulative_speedup), ("max_abs_err", f.max_abs_err)):
        if isinstance(v, (int, float)) and math.isfinite(v):
            n[k] = float(v)
    sp = f.step_speedup
    if sp:
        n["step_speedup.change_pct"] = (sp - 1) * 100
        n["step_speedup.inverse"] = 1 / sp
    return n


def step_seed_text(step: StepRecord) -> str:
    """The step's identity as canonical JSON (kernel included), the seed material of the
    writer's choices and a batch request's id: never Python's salted ``hash``. Not the released
    ``records.step_key`` (a short digest without the kernel): both feed hashes whose values
    the released texts and ids depend on, so neither may change to become the other."""
    return canonical_json([step.trajectory_id, step.step_index, step.kernel_id, step.strategy,
                           step.site, step.params, step.before_leir, step.after_leir])


def facts(step: StepRecord, hardware: Optional[Hardware] = None) -> Facts:
    """Every citable fact of one step on ``hardware`` (default: the cost model's generic core).
    Raises ValueError if the before-program does not parse."""
    from .alternatives import alternatives, follow_up, same_action

    hw = hardware or GENERIC
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
    f = Facts(step_seed_text(step), before.name, step.strategy, step.family, step.exactness,
              dict(step.site), dict(step.params), step.target, step.outcome, before, after,
              b.median_s if b else None, a.median_s if a else None,
              b.min_s if b else None, a.min_s if a else None, noise, sp,
              step.cumulative_speedup, step.max_abs_err, step.before_leir, step.after_leir)
    after_text = step.after_leir if after is not None else ""
    kind = "gpu" if any(w in (step.target or "").lower() for w in ("cuda", "gpu", "nvptx", "rocm")) \
        else "cpu"
    alts, refs = alternatives(step.before_leir, kind, hw.cores)
    alts = tuple(a for a in alts if not same_action(a, step.strategy, step.site, step.params))
    refs = tuple(r for r in refs if r.strategy != step.strategy)
    all_alts, _ = alternatives(step.before_leir, kind, hw.cores)
    pred = prediction(step.before_leir, after_text, hw)
    extra = {
        "hardware": hw,
        "at_site": site_facts(step.before_leir, after_text, step.site, hw),
        "predicted": pred,
        "diagnosis": diagnose(before, step.before_leir, hw, all_alts, pred.before_s),
        "alternatives": alts, "refusals": refs,
        "follow_up": follow_up(after_text, kind, hw.cores) if after_text else None,
        "staging": staging(after_text, (step.site or {}).get("tensor")) if after_text else None,
    }
    extra["at_hot"] = site_facts(step.before_leir, after_text,
                                 {"path": list(extra["diagnosis"].stmt_path)}, hw)
    for k, v in extra.items():
        object.__setattr__(f, k, v)
    object.__setattr__(f, "numbers", _numbers(f))
    return f


__all__ = ["Facts", "Hardware", "GENERIC", "SiteFacts", "SiteAccess", "WorkingSet", "Prediction",
           "Diagnosis", "diagnose", "distinct_bytes", "site_facts", "prediction", "ProgramFacts", "TensorFact", "LoopFact", "StmtFact", "AccessFact", "facts",
           "program_facts", "step_seed_text", "measured_numbers"]
