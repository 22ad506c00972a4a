"""Cheap cost models that rank candidates before anything is measured.

* :func:`features` — analytic features of a LEIR program, per assignment and summed: flops,
  bytes, an estimate of the traffic into L1, L2 and L3 and from DRAM (a footprint model: the outermost
  sub-nest whose touched cache lines fit a cache level is reused, everything outside it reloads
  it; a reduction's accumulator tile below its reduction loop counts as registers when it
  fits), innermost strides, loop kinds (parallel / vectorized extents, unrolled loops), guards and
  tile sizes;
* :func:`predict` — an analytic run-time estimate in seconds (roofline-like: compute at the
  vector and thread width the program uses vs. memory traffic at each level), and
  :func:`potential` — the same estimate after the free finishing moves (vectorize an innermost
  unit-stride loop, parallelize an outer loop), so that enabling steps (a split before a
  vectorization) are not ranked as useless;
* the learned model on top of these features lives in :mod:`steptp.search.ranker`.

The constants describe a generic modern x86 core (AVX-512, 48 KiB L1, 2 MiB L2); they only need
to order candidates sensibly, not to predict absolute times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..leir import ast as A
from ..lru import LRU
from ..leir.analysis import ITEMSIZE, affine
from ..leir.layout import layout_forms

FREQ = 2.5e9                 # cycles per second
SCALAR_OPS_PER_CYCLE = 2.0   # scalar float ops per cycle (one core)
AUTO_VEC = 2.0               # what LLVM's own vectorizer gains on a unit-stride serial loop
MAX_LANES = 16               # f32 lanes of one AVX-512 register
REGISTERS = 32               # AVX-512 vector registers
L1_BYTES = 48 * 1024
L2_BYTES = 2 * 1024 * 1024
LINE = 64
BW_L1 = 64.0 * FREQ          # bytes/s into registers from L1, per core
BW_L2 = 32.0 * FREQ / 2      # bytes/s L2 -> L1, per core
L3_BYTES = 16 * 1024 * 1024  # a conservative share of the shared last-level cache
BW_L3 = 16.0 * FREQ          # bytes/s L3 -> L2, per core
BW_DRAM = 12e9               # bytes/s DRAM -> L3, per core (shared bandwidth is ~2-3x that)
PARALLEL_OVERHEAD_S = 3e-6   # one parallel region (thread wake-up and join)
LOOP_OVERHEAD_CYCLES = 1.0   # per iteration of a serial (not unrolled) innermost loop


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def vector_lanes(extent: int) -> float:
    """Useful f32 lanes of a vectorized unit-stride loop of ``extent``: all of them up to one
    register (a 14-wide loop is one masked AVX-512 operation), whole registers when a register
    divides it; otherwise no better than scalar code: LLVM splits the odd-width vector poorly
    (a 28- or 56-wide conv row measured 15x slower than a 14-wide one)."""
    if extent <= MAX_LANES:
        return float(max(extent, 1))
    if extent % MAX_LANES == 0:
        return float(MAX_LANES)
    return 1.0


# ============================================================================ statement walk
@dataclass(frozen=True)
class _Stmt:
    stmt: A.Assign
    loops: tuple[A.Loop, ...]
    guards: int
    #: a self-update (``_self_update``): the loops it shares with the statement that last
    #: overwrote its tensor (a staged accumulator's fill), which are no reduction axes of it
    scope: int = 0


def _statements(program: A.Program) -> list[_Stmt]:
    out: list[_Stmt] = []
    last_set: dict[str, tuple[A.Loop, ...]] = {}   # tensor -> loops of its last plain store

    def visit(body, loops, guards):
        for s in body:
            if isinstance(s, A.Assign):
                scope = 0
                if _self_update(s):
                    for a, b in zip(last_set.get(s.tensor, ()), loops):
                        if a is not b:
                            break
                        scope += 1
                elif s.op == "=":
                    last_set[s.tensor] = loops
                out.append(_Stmt(s, loops, guards, scope))
            elif isinstance(s, A.Loop):
                visit(s.body, loops + (s,), guards)
            elif isinstance(s, A.If):
                visit(s.body, loops, guards + 1)

    visit(program.body, (), 0)
    return out


def _ops(e) -> int:
    if isinstance(e, (A.Const, A.Var, A.Load)):
        return 0
    if isinstance(e, A.Unary):
        return 1 + _ops(e.operand)
    if isinstance(e, A.Binary):
        return 1 + _ops(e.lhs) + _ops(e.rhs)
    if isinstance(e, A.Call) and e.func == "where" and len(e.args) == 3 \
            and next(A.loads(e.args[0]), None) is None:
        # a load-free condition is a bounds test on loop indices (inlined padding): integer
        # work on the index registers, one compare mask and a select per vector, not float ops
        return 1 + _ops(e.args[1]) + _ops(e.args[2])
    if isinstance(e, A.Call):
        heavy = 8 if e.func in ("exp", "log", "tanh", "erf", "sigmoid", "pow", "sqrt", "rsqrt",
                                "sin", "cos", "exp2", "log2", "log1p") else 1
        return (0 if e.func in A.DTYPES else heavy) + sum(_ops(a) for a in e.args)
    return 0


def _accesses(s: A.Assign) -> list[tuple[str, tuple, bool]]:
    """(tensor, index, is_write) of the statement; loads inside subscripts count too."""
    acc = [(s.tensor, s.index, True)]
    if s.is_reduction:
        acc.append((s.tensor, s.index, False))
    acc.extend((ld.tensor, ld.index, False) for ld in A.loads(s.value))
    for sub in s.index:
        acc.extend((ld.tensor, ld.index, False) for ld in A.loads(sub))
    seen, out = set(), []
    for a in acc:
        key = (a[0], repr(a[1]), a[2])
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def _strides(shape: Sequence[int]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return list(reversed(out))


def _floor_multiple_as_affine(e):
    """``e`` with every ``(x // c) * c`` (c a positive int constant, x affine) read as ``x``."""
    if isinstance(e, A.Binary):
        if e.op == "*":
            for q, c in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
                if (isinstance(q, A.Binary) and q.op == "//" and isinstance(c, A.Const)
                        and isinstance(q.rhs, A.Const) and c.kind == "int" and q.rhs.kind == "int"
                        and c.value == q.rhs.value and c.value > 0 and affine(q.lhs) is not None):
                    return q.lhs
        lhs, rhs = _floor_multiple_as_affine(e.lhs), _floor_multiple_as_affine(e.rhs)
        if lhs is not e.lhs or rhs is not e.rhs:
            return A.Binary(e.op, lhs, rhs)
    return e


class _Access:
    """One access with per-loop strides (elements) and per-dimension affine forms."""

    def __init__(self, tensor: A.Tensor, index, write: bool):
        self.tensor = tensor
        self.write = write
        self.itemsize = ITEMSIZE.get(tensor.dtype, 4)
        # a collapsed pair of subscripts (i//M, i%M over a dimension of M) is one dimension
        _, _, opaque = layout_forms(index, tensor.shape)
        # the footprint reads a group's base ``(e//c)*c`` as ``e`` (it differs by less than c:
        # a grouped conv's input channel ``j//4*4+m`` spans a block of j, not every channel);
        # the strides of its variables stay unknown (a vector loop over j is no contiguous walk)
        approx = tuple(_floor_multiple_as_affine(e) for e in index)
        self.forms, self.shape, _ = layout_forms(approx, tensor.shape)
        dims = _strides(self.shape)
        self.stride: dict[str, float] = {}
        self.affine = not opaque
        self.opaque_vars = {v for e in opaque for v in A.free_vars(e)}
        for f, ds in zip(self.forms, dims):
            if f is None:
                continue
            for v, c in f[0].items():
                self.stride[v] = self.stride.get(v, 0) + c * ds

    def stride_of(self, var: str) -> float:
        """Elements moved per step of ``var`` (inf when ``var`` is in a non-affine subscript)."""
        if var in self.opaque_vars:
            return math.inf
        return self.stride.get(var, 0)

    def footprint(self, inner: dict[str, int]) -> float:
        """Bytes of cache lines touched while the loops in ``inner`` run (others fixed)."""
        # dimensions of one element do not break contiguity: a 1x1 conv's weights
        # ``B[64,256,1,1]`` walk their input channels one element apart, not a line apart
        dims = [(f, n) for f, n in zip(self.forms, self.shape) if n != 1]
        if not dims:
            return LINE
        spans = []
        for f, n in dims:
            if f is None:
                spans.append(n)
                continue
            span = 1 + sum(abs(c) * (inner[v] - 1) for v, c in f[0].items() if v in inner)
            spans.append(min(n, span))
        last = spans[-1] * self.itemsize
        # the last dimension is contiguous: whole lines; other dimensions: one line run each
        lines = max(1, math.ceil(last / LINE))
        return float(math.prod(spans[:-1]) * lines * LINE)


# ============================================================================ features
FEATURE_NAMES = (
    "log_pred", "log_potential", "log_flops", "log_bytes", "log_l1_traffic", "log_l2_traffic",
    "log_dram_traffic", "log_compute_s", "vector_lanes", "vector_frac", "parallel_extent",
    "parallel_depth", "n_parallel_regions", "n_loops", "n_unrolled", "unrolled_extent",
    "n_guards", "inner_stride0", "inner_stride1", "inner_strided", "inner_extent",
    "reduction_inner", "max_tile", "n_statements", "log_iterations", "register_tile",
)


@dataclass
class Estimate:
    seconds: float
    compute_s: float
    l1: float
    l2: float
    dram: float
    flops: float
    feats: dict


def _warm(stmts: list[_Stmt], program: A.Program) -> list[frozenset]:
    """Per statement, the tensors it reads that an earlier statement writes inside a loop both
    share, in pieces (the tensor over the shared loops' iterations) that fit half of L2: the
    consumer reads them from cache, not memory (an epilogue moved into its producer's tile)."""
    out = []
    for k, st in enumerate(stmts):
        warm = set()
        reads = None   # computed only when an earlier statement shares a loop with this one
        for prev in stmts[:k]:
            shared = 0
            for a, b in zip(prev.loops, st.loops):
                if a is not b:
                    break
                shared += 1
            if not shared:
                continue
            if reads is None:
                reads = {ld.tensor for ld in A.loads(st.stmt.value)}
            t = prev.stmt.tensor
            if t not in reads or t not in program.tensors:
                continue
            tt = program.tensors[t]
            piece = math.prod(tt.shape or (1,)) * ITEMSIZE.get(tt.dtype, 4) / \
                math.prod(lp.extent for lp in st.loops[:shared])
            if piece <= L2_BYTES / 2:
                warm.add(t)
        out.append(frozenset(warm))
    return out


def _stmt_estimate(program: A.Program, st: _Stmt, cores: int, optimistic: bool,
                   warm: frozenset = frozenset()) -> Estimate:
    s, loops = st.stmt, list(st.loops)
    tensors = program.tensors
    accs = [_Access(tensors[t], idx, w) for t, idx, w in _accesses(s) if t in tensors]
    iters = float(math.prod(lp.extent for lp in loops)) if loops else 1.0
    ops = max(1, _ops(s.value) + (1 if s.is_reduction else 0))
    flops = iters * ops
    lhs_vars = {v for e in s.index for v in A.free_vars(e)}
    red_axes = ({lp.var for lp in loops[st.scope:]} - lhs_vars
                if s.is_reduction or _self_update(s) else set())

    inner = loops[-1] if loops else None
    kinds = [lp.kind for lp in loops]
    # -- vector width
    lanes, vec_frac = 1.0, 0.0
    inner_strides = [a.stride_of(inner.var) for a in accs] if inner is not None else []
    unit = bool(inner_strides) and all(x in (0, 1, -1) for x in inner_strides)
    # loads a few elements apart (a stride-2 conv's input row): each vector is assembled from
    # |stride| unit-stride loads and a shuffle, the arithmetic stays vector (MetaSchedule's
    # conv tiles vectorize such rows); the store must still be unit-stride
    shuffled = [] if unit or inner is None else _shuffled_loads(accs, inner.var)
    if inner is not None:
        if inner.kind == "vectorized":
            lanes = vector_lanes(inner.extent) if unit or shuffled else 1.0
            vec_frac = 1.0 if unit or shuffled else 0.2
        elif optimistic and inner.kind == "serial" and unit and inner.var not in red_axes \
                and inner.extent >= 8:
            lanes = vector_lanes(inner.extent)
            vec_frac = 1.0
        elif inner.kind in ("serial", "unrolled") and unit and inner.var not in red_axes:
            lanes = AUTO_VEC
    # -- threads
    par_ext, par_depth, regions = 1, -1, 1.0
    for d, lp in enumerate(loops):
        if lp.kind == "parallel":
            par_ext, par_depth = lp.extent, d
            regions = float(math.prod(x.extent for x in loops[:d])) if d else 1.0
            break
    if par_depth < 0 and optimistic:
        for d, lp in enumerate(loops):
            if lp.var in red_axes or lp.kind != "serial":
                break
            if lp.extent >= cores:
                par_ext, par_depth = lp.extent, d
                regions = float(math.prod(x.extent for x in loops[:d])) if d else 1.0
                break
    threads = min(par_ext, cores) if par_depth >= 0 else 1
    balance = (par_ext / (math.ceil(par_ext / threads) * threads)) if par_depth >= 0 else 1.0
    par = threads * balance
    # -- compute
    loop_cost = 0.0
    if inner is not None and inner.kind == "serial":
        loop_cost = iters * LOOP_OVERHEAD_CYCLES / FREQ
    unrolled = [lp for lp in loops if lp.kind == "unrolled"]
    if unrolled and inner is not None and inner.kind in ("unrolled", "vectorized"):
        loop_cost *= 0.5
    guard_cost = iters * st.guards * 1.0 / FREQ
    compute = (flops / (SCALAR_OPS_PER_CYCLE * FREQ * lanes) + loop_cost / max(lanes, 1)
               + guard_cost) / par
    # strided accesses in a vectorized loop become gathers
    if inner is not None and inner.kind == "vectorized" and not unit and not shuffled:
        compute *= 2.0
    # a reduction carried by the innermost loop serializes on the add latency
    if inner is not None and inner.var in red_axes and inner.kind in ("serial", "unrolled"):
        compute *= 2.0 if inner.kind == "serial" else 1.3
    # -- memory: footprint model per cache level
    ext = [lp.extent for lp in loops]

    reg_tile = _register_tile(s, loops, accs, red_axes, lanes, par)
    in_regs = reg_tile is not None and _fits_registers(reg_tile[1])
    red_depth = max((d for d, lp in enumerate(loops) if lp.var in red_axes), default=-1)

    fps: dict[tuple[int, frozenset], float] = {}   # the three levels share the footprints

    def warm_read(a: "_Access", skip: frozenset) -> bool:
        return a.tensor.name in skip and not a.write  # produced just before, in this iteration

    def footprint_at(d: int, skip: frozenset) -> float:
        fp = fps.get((d, skip))
        if fp is None:
            inner_ext = {lp.var: lp.extent for lp in loops[d:]}
            by_tensor: dict[str, float] = {}
            for a in accs:
                if in_regs and d > red_depth and a.tensor.name == s.tensor:
                    continue  # the accumulator tile lives in registers inside the reduction
                if warm_read(a, skip):
                    continue  # in cache
                by_tensor[a.tensor.name] = max(by_tensor.get(a.tensor.name, 0.0),
                                               a.footprint(inner_ext))
            fp = fps[(d, skip)] = sum(by_tensor.values())
        return fp

    def traffic(capacity: float, skip: frozenset = frozenset()) -> float:
        for d in range(0, len(loops) + 1):
            fp = footprint_at(d, skip)
            if fp <= capacity:
                return float(math.prod(ext[:d])) * fp
        return iters * LINE * sum(1 for a in accs if not warm_read(a, skip))

    l1 = traffic(L1_BYTES)
    l2 = traffic(L2_BYTES, warm)
    dram_total = sum(float(math.prod(a.tensor.shape or (1,))) * a.itemsize for a in accs)
    dram = max(traffic(L3_BYTES, warm), 0.0)
    mem = (l1 / (BW_L2 * threads) + l2 / (BW_L3 * threads)
           + dram / (BW_DRAM * min(threads, 2) * 1.5 if threads > 1 else BW_DRAM))
    # every access also costs a load/store slot; vector accesses move `lanes` elements at once
    slots = len(accs) + (sum(abs(a.stride_of(inner.var)) for a in shuffled)
                         if inner is not None and inner.kind == "vectorized" else 0.0)
    lsu = iters * slots / (FREQ * 2.0 * max(lanes, 1.0) * par)
    if inner is not None and inner.kind != "vectorized":
        # scalar strided walks: each element touches another line
        strided = sum(1 for x in inner_strides if x not in (0, 1, -1))
        lsu += iters * strided * 2.0 / (FREQ * par)
    if reg_tile is not None:
        lsu, tile_regs = reg_tile
    else:
        tile_regs = 0.0
    overhead = regions * PARALLEL_OVERHEAD_S if par_depth >= 0 else 0.0
    secs = max(compute, mem, lsu) + 0.25 * min(compute + lsu, mem) + overhead
    feats = {
        "vector_lanes": lanes, "vector_frac": vec_frac, "parallel_extent": float(par_ext),
        "parallel_depth": float(par_depth), "n_parallel_regions": regions,
        "n_loops": float(len(loops)), "n_unrolled": float(len(unrolled)),
        "unrolled_extent": float(sum(lp.extent for lp in unrolled)), "n_guards": float(st.guards),
        "inner_stride0": float(sum(1 for x in inner_strides if x == 0)),
        "inner_stride1": float(sum(1 for x in inner_strides if x in (1, -1))),
        "inner_strided": float(sum(1 for x in inner_strides if x not in (0, 1, -1))),
        "inner_extent": float(inner.extent if inner is not None else 1),
        "reduction_inner": float(inner is not None and inner.var in red_axes),
        "max_tile": float(max([lp.extent for lp in loops[1:]] or [1])),
        "iterations": iters, "dram_min": dram_total, "register_tile": tile_regs,
    }
    return Estimate(secs, compute, l1, l2, dram, flops, feats)


SHUFFLE_STRIDE = 4   # loads at most this many elements apart are gathered by loads + shuffles


def _shuffled_loads(accs: list["_Access"], var: str) -> list["_Access"]:
    """The loads that a vector loop over ``var`` gathers with a few unit-stride loads and a
    shuffle (stride 2..SHUFFLE_STRIDE elements), when every other access is unit-stride or
    invariant in ``var``; empty otherwise (a strided store, or a wider or unknown stride)."""
    out = []
    for a in accs:
        x = a.stride_of(var)
        if x in (0, 1, -1):
            continue
        if a.write or not math.isfinite(x) or abs(x) > SHUFFLE_STRIDE:
            return []
        out.append(a)
    return out


def _self_update(s: A.Assign) -> bool:
    """``X[I] = X[I] + e`` (``*``, ``max``, ``min``): a reduction carried in ``X`` over the loops
    ``I`` does not index, as ``cache_read_write`` writes a staged accumulator's updates."""
    if s.op != "=":
        return False
    v = s.value
    if isinstance(v, A.Binary) and v.op in ("+", "*"):
        first = v.lhs
    elif isinstance(v, A.Call) and v.func in ("max", "min") and v.args:
        first = v.args[0]
    else:
        return False
    return isinstance(first, A.Load) and first.tensor == s.tensor and first.index == s.index


def _register_tile(s: A.Assign, loops: list[A.Loop], accs: list["_Access"], red_axes: set[str],
                   lanes: float, par: float) -> tuple[float, float] | None:
    """Load/store-slot time of a reduction whose innermost loops are spatial "point" loops
    below its innermost reduction loop (a register tile, as in a CPU matmul micro-kernel), and
    the vector registers its accumulators need; None for any other statement.

    Per iteration of the loops down to the reduction loop, each operand is loaded once per
    point-loop iteration it depends on (a vector load covers ``lanes`` unit-stride elements;
    an operand invariant in a point loop is reused from a register, e.g. A[i,k] broadcast over
    j). The accumulators stay in registers when they fit in REGISTERS - 4 (two operands and
    the address arithmetic need a few, ``_fits_registers``); beyond that every update spills (a
    load and a store). (Not modelled: inside a parallel loop, LLVM may keep a
    global buffer's accumulators in memory when the row loop is rolled, as for conv1d's 4x15
    tile, 7.5 ms parallel against 2.4 serial, though not for a 512^3 matmul's 4x16 tile, 2.0
    against 4.5; staged in a local buffer, both were 1.8-2.4 ms. The search stages a tile
    before parallelizing it, ``policies.FINISH_TILE``, rather than trusting the model here.)
    """
    if not red_axes or not loops:
        return None
    r = max(d for d, lp in enumerate(loops) if lp.var in red_axes)
    point = loops[r + 1:]
    if not point:
        return None
    inner = loops[-1]
    vec = lanes if lanes > 1 else 1.0
    tile = float(math.prod(lp.extent for lp in point))
    regs = tile / vec
    outer = float(math.prod(lp.extent for lp in loops[:r + 1]))
    loads = 0.0
    for a in accs:
        if a.tensor.name == s.tensor:
            continue
        n = float(math.prod(lp.extent for lp in point if a.stride_of(lp.var) != 0))
        x = a.stride_of(inner.var)
        if vec > 1 and x in (1, -1):
            n /= vec
        elif vec > 1 and inner.kind == "vectorized" and math.isfinite(x) \
                and 2 <= abs(x) <= SHUFFLE_STRIDE:
            n *= (1 + abs(x)) / vec   # |x| loads and a shuffle per vector (``_shuffled_loads``)
        loads += n
    if not _fits_registers(regs):
        loads += 2.0 * regs
    return outer * loads / (FREQ * 2.0 * par), regs


def _fits_registers(vector_regs: float) -> bool:
    return vector_regs <= REGISTERS - 4


#: ``_stmt_estimate`` answers keyed on everything it reads: the statement, its loops' variables,
#: extents and kinds, its guards, the program's tensors, the cores and the mode. Candidates
#: differ from their parent in one loop nest, so most statements' estimates repeat across the
#: candidates of a search; bounded so a nightly run's memory stays flat.
_STMT_MEMO: "LRU[Estimate]" = LRU(16384)


#: The same answers keyed on the statement object instead of its value (held, so its ``id``
#: cannot be reused while the entry lives): a candidate shares every statement it does not
#: rewrite with its parent, and hashing and comparing a statement by value (a conv's whole
#: expression tree, on every lookup) cost more than most estimates.
_STMT_BY_ID: "LRU[tuple[A.Assign, Estimate]]" = LRU(16384)


def _stmt_estimate_memo(program: A.Program, tensors_key: tuple, st: _Stmt, cores: int,
                        optimistic: bool, warm: frozenset = frozenset()) -> Estimate:
    loops = tuple((lp.var, lp.extent, lp.kind) for lp in st.loops)
    ikey = (id(st.stmt), loops, st.guards, st.scope, tensors_key, cores, optimistic, warm)
    hit = _STMT_BY_ID.get(ikey)
    if hit is not None and hit[0] is st.stmt:
        return hit[1]
    key = (st.stmt, loops, st.guards, st.scope, tensors_key, cores, optimistic, warm)
    est = _STMT_MEMO.get(key)
    if est is None:
        est = _STMT_MEMO.put(key, _stmt_estimate(program, st, cores, optimistic, warm))
    _STMT_BY_ID.put(ikey, (st.stmt, est))
    return est


class _Decls:
    """A program's declarations as a memo key, hashed once: a tuple re-hashes every tensor on
    each lookup, once per statement and estimate. Equal when the declarations are equal."""

    __slots__ = ("decls", "_hash")

    def __init__(self, decls: tuple):
        self.decls = decls
        self._hash = hash(decls)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Decls) and self._hash == other._hash
                                 and self.decls == other.decls)


#: A program's statement walk (statements, warm tensors, declarations key), kept for the
#: program object (held): ``predict`` and ``potential`` of one candidate walk it twice.
_WALKS: "LRU[tuple]" = LRU(64)


def _walk(program: A.Program) -> tuple[list[_Stmt], list[frozenset], _Decls]:
    hit = _WALKS.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    stmts = _statements(program)
    out = (stmts, _warm(stmts, program),
           _Decls((program.inputs, program.outputs, program.intermediates)))
    _WALKS.put(id(program), (program, out))
    return out


def _estimate(program: A.Program, optimistic: bool = False, cores: int | None = None) -> Estimate:
    cores = cores or _cores()
    stmts, warm, tk = _walk(program)
    ests = [_stmt_estimate_memo(program, tk, st, cores, optimistic, w)
            for st, w in zip(stmts, warm)]
    if not ests:
        return Estimate(1e-7, 0, 0, 0, 0, 0, {})
    total = sum(e.seconds for e in ests) + 2e-7
    heavy = max(ests, key=lambda e: e.seconds)
    feats = dict(heavy.feats)
    feats["n_statements"] = float(len(ests))
    feats["n_guards"] = float(sum(e.feats["n_guards"] for e in ests))
    feats["n_parallel_regions"] = float(sum(e.feats["n_parallel_regions"] for e in ests
                                            if e.feats["parallel_depth"] >= 0))
    return Estimate(total, sum(e.compute_s for e in ests), sum(e.l1 for e in ests),
                    sum(e.l2 for e in ests), sum(e.dram for e in ests),
                    sum(e.flops for e in ests), feats)


def predict(program: A.Program, cores: int | None = None) -> float:
    """Analytic run-time estimate (seconds) of the program as written."""
    return _estimate(program, False, cores).seconds


def potential(program: A.Program, cores: int | None = None,
              predicted: float | None = None) -> float:
    """Estimate after the free finishing moves (vectorize a unit-stride innermost loop,
    parallelize an outer data-parallel loop): what this state could reach cheaply.
    ``predicted``: ``predict(program)`` when the caller has it already."""
    if predicted is None:
        predicted = predict(program, cores)
    return min(_estimate(program, True, cores).seconds, predicted)


SCORE_WEIGHT = 0.5   # the potential's share of the analytic score


def blend(log_predict: float, log_potential: float, weight: float = SCORE_WEIGHT) -> float:
    """THE analytic ranking score from its two parts (log seconds; lower is better)."""
    return (1 - weight) * log_predict + weight * log_potential


def score(program: A.Program, cores: int | None = None, weight: float = SCORE_WEIGHT) -> float:
    """The analytic ranking score of a program: a blend of its own estimate and its
    potential."""
    pred = predict(program, cores)
    return blend(math.log(pred), math.log(potential(program, cores, pred)), weight)


def features(program: A.Program, cores: int | None = None) -> np.ndarray:
    """The feature vector (order: ``FEATURE_NAMES``) for the learned model."""
    e = _estimate(program, False, cores)
    pot = potential(program, cores, e.seconds)
    f = e.feats
    lg = lambda x: math.log(max(float(x), 1e-12))  # noqa: E731
    bytes_ = f.get("dram_min", 1.0)
    row = {
        "log_pred": lg(e.seconds), "log_potential": lg(pot), "log_flops": lg(e.flops + 1),
        "log_bytes": lg(bytes_ + 1), "log_l1_traffic": lg(e.l1 + 1), "log_l2_traffic": lg(e.l2 + 1),
        "log_dram_traffic": lg(e.dram + 1), "log_compute_s": lg(e.compute_s),
        "log_iterations": lg(f.get("iterations", 1.0)),
    }
    return np.array([row[n] if n in row else float(f.get(n, 0.0)) for n in FEATURE_NAMES],
                    dtype=np.float64)


# columns of ``features`` that hold the two parts of ``score``
LOG_PREDICT = FEATURE_NAMES.index("log_pred")
LOG_POTENTIAL = FEATURE_NAMES.index("log_potential")

__all__ = ["FEATURE_NAMES", "LOG_POTENTIAL", "LOG_PREDICT", "blend", "predict", "potential",
           "score", "features"]
