"""The memory / layout family: caching a tensor region in a staging buffer (cache_read_write),
transposing a tensor's layout, choosing an intermediate's storage scope, padding its innermost
dimension, and precomputing index arithmetic into an integer table.

Every rewrite here is exact: values are only copied, re-addressed or stored elsewhere, never
recomputed differently. Sites name a loop or a statement by path, with the tensor concerned in
``tensor`` (and ``mode`` for caches); parameters are small JSON dicts (``{"scope": "local"}``,
``{"perm": [1, 0]}``, ``{"pad": 1}``, ``{"expr": "i*16+j"}``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ..leir import ast as A
from ..leir.analysis import ITEMSIZE
from ..leir.printer import format_expr, format_stmt
from . import _deps as D
from ..leir.races import thread_elements
from ..leir.analysis import affine
from ..leir.ast import iter_stmts, node_at
from ..leir.nav import (Path, chain as _chain, enclosing_loops, reduction_axes, replace_at, tensors_read,
                        tensors_written)
from ._ir import affine_expr, all_names, fresh_name, fresh_tensor
from .base import OK, Site, Strategy, Verdict, refuse
from .graph import load_sites, map_expr, map_stmt_exprs, value_nodes, writers
from .registry import register

MAX_LOCAL_BYTES = 64 * 1024     # a `local` buffer must fit the stack / registers
MAX_SHARED_BYTES = 48 * 1024    # static shared memory per block on every CUDA GPU
SERIAL_KINDS = ("serial", "unrolled")
CONCURRENT_KINDS = A.CONCURRENT_KINDS


def _bytes(t: A.Tensor) -> int:
    return t.size * ITEMSIZE[t.dtype]


def _stmt(s: A.Stmt) -> str:
    return "`" + format_stmt(s).strip().split("\n")[0] + "`"


def _copy(shape: Sequence[int], names: set[str], dst: str, dst_idx, src: str, src_idx) -> A.Stmt:
    """A nest over ``shape`` with fresh variables ``c0, c1...``: ``dst[dst_idx(vs)] = src[src_idx(vs)]``."""
    vs: list[str] = []
    for k in range(len(shape)):
        vs.append(fresh_name(f"c{k}", names | set(vs)))
    s: A.Stmt = A.Assign(dst, tuple(dst_idx(vs)), "=", A.Load(src, tuple(src_idx(vs))))
    for v, n in reversed(list(zip(vs, shape))):
        s = A.Loop(v, n, "serial", (s,))
    return s


# ============================================================================ cache_read_write
def _identity(op: str, dtype: str) -> A.Const:
    """The identity of a reduction op as a literal (what LEIR's implicit init stores)."""
    if op == "+=":
        return A.const(0.0 if dtype in A.FLOAT_DTYPES else 0)
    if op == "*=":
        return A.const(1.0 if dtype in A.FLOAT_DTYPES else 1)
    if dtype in A.FLOAT_DTYPES:
        return A.Const(float("-inf") if op == "max=" else float("inf"), "float")
    import numpy as np
    info = np.iinfo(np.dtype(A.DTYPES[dtype]))
    return A.const(int(info.min if op == "max=" else info.max))


def _fill(shape: Sequence[int], names: set[str], dst: str, value: A.Expr) -> A.Stmt:
    vs: list[str] = []
    for k in range(len(shape)):
        vs.append(fresh_name(f"c{k}", names | set(vs)))
    s: A.Stmt = A.Assign(dst, tuple(A.Var(v) for v in vs), "=", value)
    for v, n in reversed(list(zip(vs, shape))):
        s = A.Loop(v, n, "serial", (s,))
    return s


BLOCK_KINDS, THREAD_AXES = A.BLOCK_KINDS, A.THREAD_AXES


def block_threads(loop: A.Loop) -> tuple[dict[str, int], str]:
    """The threadIdx loops under ``loop`` (a GPU block's body): axis -> extent, and a reason
    when an axis has two extents (one block has one shape)."""
    found: dict[str, int] = {}
    for _, s in iter_stmts(loop.body):
        if isinstance(s, A.Loop) and s.kind in THREAD_AXES:
            if found.setdefault(s.kind, s.extent) != s.extent:
                return {}, (f"{s.kind} has extents {found[s.kind]} and {s.extent} under "
                            f"{loop.var}: one block has one shape")
    return found, ""


def _cooperative_copy(shape: Sequence[int], threads: dict[str, int], names: set[str], dst: str,
                      dst_idx, src: str, src_idx) -> A.Stmt:
    """The block's threads copy ``shape`` elements together: element ``c = c0*T + t`` (``t``
    the thread's rank, x fastest) goes to ``dst[unflatten(c)]``, so neighbouring threads read
    neighbouring elements of the region's last dimension (coalesced); a guard drops the tail
    when the thread count does not divide the region."""
    n = 1
    for x in shape:
        n *= x
    axes = [a for a in THREAD_AXES if a in threads]
    total = 1
    for a in axes:
        total *= threads[a]
    used = set(names)
    c0 = fresh_name("c0", used)
    used.add(c0)
    tvars = []
    for a in axes:
        v = fresh_name("t" + a[-1], used)
        used.add(v)
        tvars.append(v)
    if list(shape) == [threads[a] for a in axes]:
        # the region has the block's shape: thread (ty, tx) copies element [ty, tx]
        es = [A.Var(v) for v in tvars]
        s: A.Stmt = A.Assign(dst, tuple(dst_idx(es)), "=", A.Load(src, tuple(src_idx(es))))
        for v, a in reversed(list(zip(tvars, axes))):
            s = A.Loop(v, threads[a], a, (s,))
        return s
    rank: A.Expr | None = None
    stride = 1
    for v, a in reversed(list(zip(tvars, axes))):
        term: A.Expr = A.Var(v) if stride == 1 else A.Binary("*", A.Var(v), A.const(stride))
        rank = term if rank is None else A.Binary("+", term, rank)
        stride *= threads[a]
    outer = -(-n // total)
    flat: A.Expr = rank if outer == 1 else A.Binary(
        "+", A.Binary("*", A.Var(c0), A.const(total)), rank)
    idx: list[A.Expr] = []
    inner = n
    for d, x in enumerate(shape):
        inner //= x
        e = flat if inner == 1 else A.Binary("//", flat, A.const(inner))
        if d > 0:
            e = A.Binary("%", e, A.const(x))
        idx.append(e)
    s = A.Assign(dst, tuple(dst_idx(idx)), "=", A.Load(src, tuple(src_idx(idx))))
    if outer * total != n:
        s = A.If(A.Binary("<", flat, A.const(n)), (s,))
    for v, a in reversed(list(zip(tvars, axes))):
        s = A.Loop(v, threads[a], a, (s,))
    if outer > 1:
        s = A.Loop(c0, outer, "serial", (s,))
    return s


def _covers_once(coef: dict[str, int], extents: dict[str, int], size: int) -> bool:
    """Do the inner loops in ``coef`` (variable -> coefficient) walk ``0 .. size-1`` once each,
    as mixed-radix digits (a split row ``i_o*4 + i_i``: coefficients 1, 4 over extents 4, ...)?
    Then a statement under them writes the whole region, whatever the tiling did to its loop."""
    step = 1
    for v, c in sorted(coef.items(), key=lambda vc: (vc[1], vc[0])):
        if v not in extents or c != step:
            return False
        step *= extents[v]
    return step == size


def _region(program: A.Program, lpath: Path, tensor: str, accs: Sequence[D.Access]):
    """The box of ``tensor`` one iteration of the loop at ``lpath`` touches: per dimension
    (base coefficients over the loop and its enclosing loops, lo, hi). None and a reason when the
    accesses are not affine or move differently with the outer loops."""
    depth = len(lpath)
    t = program.tensor(tensor)
    dims = []
    for d in range(len(t.shape)):
        bases, los, his = [], [], []
        for a in accs:
            f = a.index[d]
            if f is None:
                return None, f"subscript {d} of an access `{a.text}` to {tensor} is not affine"
            inner = {lp.var: lp.extent for lp in a.loops if len(lp.path) > depth}
            outer = {lp.var for lp in a.loops if len(lp.path) <= depth}
            if any(v not in inner and v not in outer for v in f[0]):
                return None, f"subscript {d} of `{a.text}` uses a variable no loop binds"
            base = {v: c for v, c in f[0].items() if v in outer}
            lo = hi = f[1]
            for v, c in f[0].items():
                if v in inner:
                    lo += min(0, c * (inner[v] - 1))
                    hi += max(0, c * (inner[v] - 1))
            bases.append(base)
            los.append(lo)
            his.append(hi)
        if any(b != bases[0] for b in bases):
            return None, (f"accesses to {tensor} move differently with the outer loops in dimension "
                          f"{d}: no single region per iteration")
        dims.append((bases[0], min(los), max(his)))
    # the box must stay inside the tensor for every value of the outer loops
    ext = {lp.var: lp.extent for lp in enclosing_loops(program, lpath) + [node_at(program, lpath)]}
    for d, (base, lo, hi) in enumerate(dims):
        bmin = lo + sum(min(0, c * (ext[v] - 1)) for v, c in base.items())
        bmax = hi + sum(max(0, c * (ext[v] - 1)) for v, c in base.items())
        if bmin < 0 or bmax > t.shape[d] - 1:
            return None, (f"the region of {tensor} one iteration touches leaves [0, {t.shape[d] - 1}] "
                          f"in dimension {d}")
    return dims, ""


def _rebase(index: Sequence[A.Expr], dims, keep: Sequence[int]) -> tuple[A.Expr, ...]:
    out = []
    for d in keep:
        coef, const = affine(index[d])
        base, lo, _ = dims[d]
        rest = {v: c for v, c in coef.items() if v not in base}
        out.append(affine_expr(rest, const - lo))
    return tuple(out)


def _gpu_level(around: Sequence[A.Loop], loop: A.Loop) -> str | None:
    """Where ``loop`` sits in a GPU kernel: ``"block"`` (inside blockIdx loops, outside the
    threads, with threadIdx loops below it), ``"thread"`` (at or inside a threadIdx loop, none
    below), ``"outside"`` (any other place in a bound nest) or None (no GPU binding here)."""
    kinds = [lp.kind for lp in list(around) + [loop]]
    below = any(isinstance(s, A.Loop) and s.kind in THREAD_AXES for _, s in iter_stmts(loop.body))
    if not any(k in A.THREAD_KINDS for k in kinds) and not below:
        return None
    if below:
        # inside every blockIdx loop: the buffer belongs to one block
        inner_blocks = any(isinstance(s, A.Loop) and s.kind in BLOCK_KINDS
                           for _, s in iter_stmts(loop.body))
        ok = (all(k in SERIAL_KINDS + BLOCK_KINDS for k in kinds) and not inner_blocks
              and any(k in BLOCK_KINDS for k in kinds))
        return "block" if ok else "outside"
    if any(k in THREAD_AXES for k in kinds) and all(k in SERIAL_KINDS + A.THREAD_KINDS
                                                     for k in kinds):
        return "thread"
    return "outside"


@dataclass(frozen=True)
class _Owned:
    """The loops (threadIdx and serial, outermost first) a thread updates its elements in, and
    the subscript it updates them at."""

    loops: tuple[A.Loop, ...]
    index: tuple[A.Expr, ...]


def _thread_owned(program, lpath, tensor, accs, size) -> tuple[_Owned | None, str]:
    """Does every thread of the block under the loop at ``lpath`` update elements of ``tensor``
    that no other thread touches? One statement must access it there, under threadIdx loops,
    and enumerating its subscript over the loops it uses must give each element one thread."""
    stmts = {a.stmt for a in accs}
    if len(stmts) != 1:
        return None, (f"{len(stmts)} statements access {tensor} in the block: per-thread "
                      f"accumulators need the one reduction alone")
    spath = next(iter(stmts))
    stmt = node_at(program, spath)
    inside = _chain(program, spath)[len(lpath):-1]      # the nodes between the loop and it
    loops = [x for x in inside if isinstance(x, A.Loop)]
    if any(isinstance(x, A.If) for x in inside):
        return None, f"{_stmt(stmt)} is guarded: the elements a thread updates vary"
    used = {v for i in stmt.index for v in A.free_vars(i)}
    for lp in loops:
        if lp.kind in THREAD_AXES and lp.var not in used:
            return None, (f"the {lp.extent} threads of {lp.var} ({lp.kind}) update the same "
                          f"elements of {tensor} in {_stmt(stmt)}")
    mine = tuple(lp for lp in loops if lp.var in used)
    if not any(lp.kind in THREAD_AXES for lp in mine):
        return None, f"no threadIdx loop moves the subscript of {_stmt(stmt)}"
    # the loops around the cached one are one iteration: the region's offset, held at 0
    pts = thread_elements(stmt.index, loops, fixed=used - {lp.var for lp in loops})
    if pts is None:
        return None, (f"the subscript of {_stmt(stmt)} is not affine, or its (thread, "
                      f"element) pairs are too many to check")
    owner: dict[tuple[int, ...], tuple] = {}
    for who, el in pts:
        if owner.setdefault(el, who) != who:
            return None, (f"two threads update {tensor}[{', '.join(map(str, el))}] in "
                          f"{_stmt(stmt)}")
    if len(owner) != size:
        return None, f"the threads update {len(owner)} of the region's {size} elements"
    return _Owned(mine, tuple(stmt.index)), ""


def _owned_nest(w: _Owned, used: set[str], body: A.Assign) -> A.Stmt:
    """``body`` under fresh copies (names added to ``used``) of the loops a thread updates its
    elements in."""
    sub = {}
    for lp in w.loops:
        v = fresh_name(lp.var, used)
        used.add(v)
        sub[lp.var] = A.Var(v)
    s: A.Stmt = map_stmt_exprs(body, lambda n: sub.get(n.name) if isinstance(n, A.Var) else None)
    for lp in reversed(w.loops):
        s = A.Loop(sub[lp.var].name, lp.extent, lp.kind, (s,))
    return s


def _gpu_scope_check(program, around, loop, scope, mode) -> tuple[Verdict, dict[str, int]]:
    """The GPU's scope rules for a staging buffer at ``loop``; the block's threads (axis ->
    extent) when it is shared."""
    level = _gpu_level(around, loop)
    if scope == "shared":
        if level != "block":
            return refuse(f"a shared buffer is filled by a block's threads together: loop "
                          f"{loop.var} must lie inside blockIdx loops and outside the threadIdx "
                          f"loops, with threadIdx loops below it"), {}
        if mode != "read":
            return refuse("a shared buffer is a cache_read here: its threads would write their "
                          "accumulators to one buffer (use a local cache_write inside the "
                          "threads)"), {}
        threads, why = block_threads(loop)
        return (refuse(why), {}) if why else (OK, threads)
    if scope == "local":
        if level == "block" and mode == "write":
            # per-thread accumulators: each thread keeps the elements it alone updates
            threads, why = block_threads(loop)
            return (refuse(why), {}) if why else (OK, threads)
        if level != "thread":
            return refuse(f"a local buffer at {loop.var} would be a private copy of the whole "
                          f"region in every thread of the block (stage it in shared, or cache "
                          f"at a loop inside the threadIdx loops)"), {}
        return OK, {}
    return refuse(f"a {scope} staging buffer inside a GPU kernel would be shared by every "
                  f"block (use shared or local)"), {}


@register
class CacheReadWrite(Strategy):
    name = "cache_read_write"
    family = "memory"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("cache_read: at the start of each iteration of a loop, copy the region of a "
                   "tensor the iteration reads into a small staging buffer and read from it. "
                   "cache_write: redirect every access of a tensor inside the loop to a staging "
                   "buffer (accumulating there) and copy it back at the end of the iteration "
                   "(copying in first unless one statement overwrites the whole region before any "
                   "read). The buffer is `local` when it fits 64 KiB, else `global`; under a parallel loop "
                   "only a local one (each iteration, so each thread, has its own). On a GPU: "
                   "`shared` at a loop of a block outside its threads (blockIdx-bound or serial, "
                   "threadIdx loops inside), read-only, filled by all the block's threads "
                   "together within 48 KiB; `local` at or inside a thread's loops.")

    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if not isinstance(s, A.Loop):
                continue
            level = _gpu_level(enclosing_loops(program, p), s)
            if level is None and (s.kind not in SERIAL_KINDS or any(
                    lp.kind not in SERIAL_KINDS + ("parallel",)
                    for lp in enclosing_loops(program, p))):
                continue
            if level == "outside":
                continue
            written = tensors_written(s)
            for t in tensors_read(s):
                if t not in written:
                    out.append(Site.make(p, [s.var], tensor=t, mode="read"))
            for t in written:   # at a block: per-thread accumulators (local, see _plan)
                out.append(Site.make(p, [s.var], tensor=t, mode="write"))
        return out

    def params(self, program, site, rng=None):
        # on a GPU the level decides: shared for a block, local for a thread; on a CPU local
        # when a local buffer is legal here (it fits MAX_LOCAL_BYTES, and under a parallel loop
        # only a local one is private to each iteration), else global
        loop = node_at(program, tuple(site.path))
        if isinstance(loop, A.Loop):
            level = _gpu_level(enclosing_loops(program, tuple(site.path)), loop)
            if level == "block":
                return [{"scope": "shared" if site.get("mode") == "read" else "local"}]
            if level == "thread":
                return [{"scope": "local"}]
        v, _ = self._plan(program, site, {"scope": "local"})
        return [{"scope": "local" if v.ok else "global"}]

    def _plan(self, program, site, params) -> tuple[Verdict, Any]:
        path = tuple(site.path)
        loop = node_at(program, path)
        if not isinstance(loop, A.Loop):
            return refuse(f"no loop at path {list(path)}"), None
        if site.loops and site.loops[0] != loop.var:
            return refuse(f"the loop at path {list(path)} is {loop.var}, not {site.loops[0]}"), None
        scope = params.get("scope", "local")
        around = enclosing_loops(program, path)
        threads: dict[str, int] = {}
        gpu = scope == "shared" or _gpu_level(around, loop) is not None
        if gpu:
            v, threads = _gpu_scope_check(program, around, loop, scope, site.get("mode"))
            if not v.ok:
                return v, None
        # a local buffer whose accesses all lie in one iteration of the cache loop is allocated
        # there, per iteration (``leir.private``), so per thread of a parallel loop around it;
        # a global one, or one around a GPU block's threads, would be shared (on a GPU the
        # rules above decide)
        shared = [] if gpu else [
            lp for lp in around + [loop] if lp.kind not in SERIAL_KINDS
            and not (lp.kind == "parallel" and lp is not loop and scope == "local")]
        if shared:
            bad = shared[0]
            why = (f"; a local staging buffer would be private to each of its iterations"
                   if bad.kind == "parallel" and bad is not loop else "")
            return refuse(f"loop {bad.var} is {bad.kind}: one {scope} staging buffer would be "
                          f"shared by its concurrent iterations{why}"), None
        tensor, mode = site.get("tensor"), site.get("mode")
        if tensor not in program.tensors:
            return refuse(f"no tensor {tensor!r}"), None
        if mode not in ("read", "write"):
            return refuse("mode must be read or write"), None
        if scope not in ("local", "global", "shared"):
            return refuse("the staging buffer's scope must be local, global or shared"), None
        accs = [a for a in D.collect_under(program, path) if a.tensor == tensor]
        if not accs:
            return refuse(f"loop {loop.var} does not access {tensor}"), None
        written = any(a.write for a in accs)
        if mode == "read" and written:
            w = next(a for a in accs if a.write)
            return refuse(f"{tensor} is written inside loop {loop.var} (`{w.text}`): a read cache "
                          f"would go stale (use mode write)"), None
        if mode == "write" and not written:
            return refuse(f"{tensor} is only read inside loop {loop.var}: nothing to cache_write"), None
        if mode == "write" and any(isinstance(n, A.Load) and n.tensor == tensor for _, s in iter_stmts(loop.body)
                                   if isinstance(s, A.Assign) for i in s.index for n in A.walk(i)):
            return refuse(f"{tensor} is read inside a subscript"), None
        dims, why = _region(program, path, tensor, accs)
        if dims is None:
            return refuse(why), None
        keep = [d for d, (_, lo, hi) in enumerate(dims) if hi > lo]
        shape = tuple(dims[d][2] - dims[d][1] + 1 for d in keep)
        t = program.tensor(tensor)
        n = 1
        for x in shape:
            n *= x
        if mode == "read" and n < 2:
            return refuse(f"one iteration of {loop.var} reads a single element of {tensor}: "
                          f"nothing to stage"), None
        if n >= t.size and mode == "read":
            return refuse(f"one iteration of {loop.var} reads all of {tensor}: the cache would be "
                          f"a full copy every iteration"), None
        if scope == "local" and n * ITEMSIZE[t.dtype] > MAX_LOCAL_BYTES:
            return refuse(f"a {n * ITEMSIZE[t.dtype]}-byte staging buffer exceeds the "
                          f"{MAX_LOCAL_BYTES}-byte limit of local memory"), None
        if scope == "shared":
            used = sum(_bytes(x) for x in program.intermediates if x.scope == "shared")
            if used + n * ITEMSIZE[t.dtype] > MAX_SHARED_BYTES:
                return refuse(f"a {n * ITEMSIZE[t.dtype]}-byte shared buffer"
                              f"{f' beside {used} bytes already shared' if used else ''} "
                              f"exceeds the {MAX_SHARED_BYTES // 1024} KiB of static shared "
                              f"memory per block"), None
        copy_in = mode == "read" or self._needs_copy_in(program, path, tensor, accs, dims)
        owner = None
        if threads and scope == "local":
            owner, why = _thread_owned(program, path, tensor, accs, n)
            if owner is None:
                return refuse(why), None
            if copy_in or not any(a.reduction for a in accs if a.write):
                return refuse(f"per-thread accumulators need a reduction of {tensor} from "
                              f"scratch within one iteration of {loop.var}"), None
        reduction = None
        if mode == "write":
            red = [node_at(program, a.stmt) for a in accs if a.write and a.reduction]
            if red:
                if copy_in:
                    return refuse(f"{_stmt(red[0])} does not reduce a whole region of {tensor} "
                                  f"from scratch within one iteration of {loop.var} (or other "
                                  f"statements read it first): a cache_write would restart or "
                                  f"split its accumulation"), None
                reduction = red[0].op
        if copy_in and mode == "write" and tensor in {x.name for x in program.intermediates}:
            first = min(q for q, _ in writers(program, tensor))
            if first >= path:
                return refuse(f"the cache would copy {tensor} in before anything writes it"), None
        return OK, (dims, shape, keep, copy_in, reduction, threads, owner)

    def _needs_copy_in(self, program, path, tensor, accs, dims) -> bool:
        """False when one statement overwrites the whole region each iteration before any read."""
        ws = {a.stmt for a in accs if a.write}
        if len(ws) != 1:
            return True
        wpath = next(iter(ws))
        w = node_at(program, wpath)
        if any(isinstance(x, A.If) for x in _chain(program, wpath)[len(path):-1]):
            return True   # a guard may skip elements: they must keep what they held
        if tensor in tensors_read(w.value) or any(tensor in tensors_read(i) for i in w.index):
            return True
        loops = enclosing_loops(program, wpath)
        inner = {lp.var: lp.extent for lp in loops[len(enclosing_loops(program, path)) + 1:]}
        if w.is_reduction:
            axes = reduction_axes(w, loops)
            if any(v not in inner for v in axes):
                return True
        for d, e in enumerate(w.index):
            base, lo, hi = dims[d]
            coef, const = affine(e)
            rest = {v: c for v, c in coef.items() if v not in base}
            if hi == lo:
                if rest or const != lo:
                    return True
            elif const != lo or not _covers_once(rest, inner, hi - lo + 1):
                return True
        top = wpath[len(path)]
        for a in accs:
            if not a.write and not (a.stmt == wpath) and a.stmt[len(path)] <= top:
                return True
        return False

    def check(self, program, site, params):
        return self._plan(program, site, params)[0]

    def rewrite(self, program, site, params):
        path = tuple(site.path)
        _, (dims, shape, keep, copy_in, reduction, threads, owner) = self._plan(program, site,
                                                                               params)
        loop = node_at(program, path)
        tensor, mode = site.get("tensor"), site.get("mode")
        t = program.tensor(tensor)
        cname = fresh_tensor(program)
        cache = A.Tensor(cname, t.dtype, shape, params.get("scope", "local"))
        names = all_names(program) | {cname}

        def f(n):
            if isinstance(n, A.Load) and n.tensor == tensor:
                return A.Load(cname, _rebase(n.index, dims, keep))
            return None

        def redirect(s):
            if isinstance(s, (A.Loop, A.If)):
                if isinstance(s, A.If):
                    s = replace(s, cond=map_expr(s.cond, f))
                return replace(s, body=tuple(redirect(b) for b in s.body))
            s = map_stmt_exprs(s, f)
            if mode == "write" and s.tensor == tensor:
                idx = _rebase(s.index, dims, keep)
                if s.is_reduction:  # explicit init (the copy-in nest) + update: see _plan
                    cur = A.Load(cname, idx)
                    if s.op in ("max=", "min="):
                        val: A.Expr = A.Call(s.op[:3], (cur, s.value))
                    else:
                        val = A.Binary(s.op[0], cur, s.value)
                    s = A.Assign(cname, idx, "=", val)
                else:
                    s = replace(s, tensor=cname, index=idx)
            return s

        def full_at(es):
            it = iter(es)
            out = []
            for d, (base, lo, hi) in enumerate(dims):
                off = affine_expr(base, lo)
                if hi > lo:
                    v = next(it)
                    off = v if off == A.const(0) else A.Binary("+", off, v)
                out.append(off)
            return out

        def full(vs):
            return full_at([A.Var(v) for v in vs])

        def local(vs):
            return [A.Var(v) for v in vs]

        body = tuple(redirect(s) for s in loop.body)
        if owner is not None:
            # each thread fills and writes back its own elements, in the loops it updates them
            w, used = owner, set(names)
            fill = _owned_nest(w, used, A.Assign(cname, _rebase(w.index, dims, keep), "=",
                                                 _identity(reduction, t.dtype)))
            back = _owned_nest(w, used, A.Assign(tensor, w.index, "=",
                                                 A.Load(cname, _rebase(w.index, dims, keep))))
            body = (fill,) + body + (back,)
        elif copy_in and threads and params.get("scope") == "shared":
            body = (_cooperative_copy(shape, threads, names, cname, list, tensor, full_at),) + body
        elif copy_in:
            body = (_copy(shape, names, cname, local, tensor, full),) + body
        elif reduction is not None:
            body = (_fill(shape, names, cname, _identity(reduction, t.dtype)),) + body
        if mode == "write" and owner is None:
            body = body + (_copy(shape, names, tensor, full, cname, local),)
        prog = replace(program, intermediates=program.intermediates + (cache,))
        return replace_at(prog, path, [replace(loop, body=body)])


# ============================================================================ layout
def _perms(shape: Sequence[int]) -> list[list[int]]:
    n = len(shape)
    if n <= 3:
        cands = [list(p) for p in itertools.permutations(range(n))]
    else:
        cands = []
        for a, b in itertools.combinations(range(n), 2):
            p = list(range(n))
            p[a], p[b] = p[b], p[a]
            cands.append(p)
    out = []
    for p in cands:
        moved = [d for d in p if shape[d] > 1]
        if moved != sorted(moved):
            out.append(p)
    return out


def _permute_accesses(program: A.Program, tensor: str, perm: Sequence[int], new_name: str,
                      loads_only: bool) -> A.Program:
    def f(n):
        if isinstance(n, A.Load) and n.tensor == tensor:
            idx = tuple(map_expr(i, f) for i in n.index)
            return A.Load(new_name, tuple(idx[d] for d in perm))
        return None

    def go(s):
        if isinstance(s, (A.Loop, A.If)):
            if isinstance(s, A.If):
                s = replace(s, cond=map_expr(s.cond, f))
            return replace(s, body=tuple(go(b) for b in s.body))
        s = map_stmt_exprs(s, f)
        if not loads_only and s.tensor == tensor:
            s = replace(s, tensor=new_name, index=tuple(s.index[d] for d in perm))
        return s

    return replace(program, body=tuple(go(s) for s in program.body))


@register
class LayoutTransformation(Strategy):
    name = "layout_transformation"
    family = "memory"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "layout_transformation"
    description = ("Store a tensor with its dimensions permuted: an intermediate `T[a,b]` becomes "
                   "`T[b,a]` with every access rewritten; an input gets a transposed copy at the "
                   "start of the kernel that every read uses. Outputs keep their layout.")

    def sites(self, program, analysis=None):
        out = []
        for t in program.inputs:
            if len(t.shape) >= 2 and load_sites(program, t.name) and _perms(t.shape):
                out.append(Site.make((), [], tensor=t.name))
        for t in program.intermediates:
            ws = writers(program, t.name)
            if len(t.shape) >= 2 and ws and _perms(t.shape):
                out.append(Site.make(ws[0][0], [], tensor=t.name))
        return out

    def params(self, program, site, rng=None):
        t = program.tensors.get(site.get("tensor"))
        return [{"perm": p} for p in _perms(t.shape)] if t is not None else []

    def check(self, program, site, params):
        name = site.get("tensor")
        t = program.tensors.get(name)
        if t is None:
            return refuse(f"no tensor {name!r}")
        if t in program.outputs:
            return refuse(f"{name} is a kernel output: its layout is part of the kernel's signature")
        perm = params.get("perm")
        if not isinstance(perm, (list, tuple)) or sorted(perm) != list(range(len(t.shape))):
            return refuse(f"perm must be a permutation of 0..{len(t.shape) - 1}")
        if list(perm) == list(range(len(t.shape))):
            return refuse("the identity permutation changes nothing")
        if t in program.inputs and not load_sites(program, name):
            return refuse(f"nothing reads {name}")
        return OK

    def rewrite(self, program, site, params):
        name = site.get("tensor")
        perm = [int(d) for d in params["perm"]]
        t = program.tensor(name)
        shape = tuple(t.shape[d] for d in perm)
        if t in program.intermediates:
            prog = _permute_accesses(program, name, perm, name, loads_only=False)
            inter = tuple(replace(x, shape=shape) if x.name == name else x for x in prog.intermediates)
            return replace(prog, intermediates=inter)
        new = fresh_tensor(program)
        prog = _permute_accesses(program, name, perm, new, loads_only=True)
        names = all_names(program) | {new}
        copy = _copy(t.shape, names, new, lambda vs: [A.Var(vs[d]) for d in perm], name,
                     lambda vs: [A.Var(v) for v in vs])
        return replace(prog, intermediates=prog.intermediates + (A.Tensor(new, t.dtype, shape),),
                       body=(copy,) + prog.body)


# ============================================================================ storage scope
def _access_loops(program: A.Program, tensor: str) -> list[tuple[Path, list[A.Loop], list[Path]]]:
    """(statement path, enclosing loops, their paths) of every statement touching ``tensor``."""
    out = []
    for p, s in iter_stmts(program.body):
        touches = False
        if isinstance(s, A.Assign):
            touches = s.tensor == tensor or tensor in tensors_read(s)
        elif isinstance(s, A.If):
            touches = any(isinstance(n, A.Load) and n.tensor == tensor for n in A.walk(s.cond))
        if touches:
            loops = enclosing_loops(program, p)
            paths = [p[:k] for k in range(1, len(p)) if isinstance(node_at(program, p[:k]), A.Loop)]
            out.append((p, loops, paths))
    return out


def _private_to(program: A.Program, tensor: str, kinds: Sequence[str], what: str) -> Verdict:
    """Every loop of one of ``kinds`` around an access of ``tensor`` must enclose all its accesses
    and carry no dependence on it (each concurrent iteration then touches its own elements)."""
    uses = _access_loops(program, tensor)
    accs = [a for a in D.collect(program.body) if a.tensor == tensor]
    for p, loops, paths in uses:
        for lp, lpath in zip(loops, paths):
            if lp.kind not in kinds:
                continue
            for q, _, _ in uses:
                if q[:len(lpath)] != lpath:
                    return refuse(f"{tensor} is used both inside and outside the {lp.kind} loop "
                                  f"{lp.var}: a {what} buffer would not be shared between them")
            if D.carried_by(accs, lpath) is not None:
                return refuse(f"iterations of the {lp.kind} loop {lp.var} share elements of "
                              f"{tensor}: a {what} buffer is private to each of them")
    return OK


@register
class SetStorageScope(Strategy):
    name = "set_storage_scope"
    family = "memory"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "set_storage_scope"
    description = (f"Move an intermediate to another storage scope. `local` (registers / stack) "
                   f"needs at most {MAX_LOCAL_BYTES // 1024} KiB and no sharing across parallel or "
                   f"thread-bound iterations; `shared` exists only on GPUs: every use must sit under "
                   f"the same blockIdx-bound loops, which share no element, within "
                   f"{MAX_SHARED_BYTES // 1024} KiB; `global` is always legal.")

    def sites(self, program, analysis=None):
        out = []
        for t in program.intermediates:
            ws = writers(program, t.name)
            if ws:
                out.append(Site.make(ws[0][0], [], tensor=t.name))
        return out

    def params(self, program, site, rng=None):
        t = program.tensors.get(site.get("tensor"))
        return [{"scope": s} for s in A.SCOPES if t is not None and s != t.scope]

    def check(self, program, site, params):
        name = site.get("tensor")
        t = program.tensors.get(name)
        if t is None or t not in program.intermediates:
            return refuse(f"{name!r} is not an intermediate (kernel arguments live in global memory)")
        scope = params.get("scope")
        if scope not in A.SCOPES:
            return refuse(f"scope must be one of {', '.join(A.SCOPES)}")
        if scope == t.scope:
            return refuse(f"{name} is already {scope}")
        if scope == "global":
            return OK
        if scope == "local":
            if _bytes(t) > MAX_LOCAL_BYTES:
                return refuse(f"{name} takes {_bytes(t)} bytes: more than the {MAX_LOCAL_BYTES} "
                              f"bytes a local buffer may hold")
            return _private_to(program, name, CONCURRENT_KINDS, "local")
        # shared
        uses = _access_loops(program, name)
        for p, loops, _ in uses:
            if not any(lp.kind.startswith("blockIdx") for lp in loops):
                return refuse(f"shared memory exists only on a GPU, per thread block: "
                              f"{_stmt(node_at(program, p))} uses {name} outside any blockIdx-bound "
                              f"loop")
        if len({p[0] for p, _, _ in uses}) != 1:
            return refuse(f"{name} is used by several kernels (top-level nests); shared memory "
                          f"lives only as long as one")
        if _bytes(t) > MAX_SHARED_BYTES:
            return refuse(f"{name} takes {_bytes(t)} bytes: more than {MAX_SHARED_BYTES} bytes of "
                          f"shared memory per block")
        return _private_to(program, name, ("parallel",) + tuple(k for k in A.THREAD_KINDS
                                                                 if k.startswith("blockIdx")), "shared")

    def rewrite(self, program, site, params):
        name = site.get("tensor")
        inter = tuple(replace(x, scope=params["scope"]) if x.name == name else x
                      for x in program.intermediates)
        return replace(program, intermediates=inter)


# ============================================================================ storage layout
@register
class SetStorageLayout(Strategy):
    name = "set_storage_layout"
    family = "memory"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Grow an intermediate's innermost dimension without changing any access: "
                   "`pad` adds elements (e.g. +1 so that rows fall in different shared-memory "
                   "banks), `align` rounds it up to a multiple (e.g. 16 for aligned vector rows). "
                   "The extra elements are never read.")

    def sites(self, program, analysis=None):
        out = []
        for t in program.intermediates:
            ws = writers(program, t.name)
            if len(t.shape) >= 2 and ws:
                out.append(Site.make(ws[0][0], [], tensor=t.name))
        return out

    def params(self, program, site, rng=None):
        t = program.tensors.get(site.get("tensor"))
        if t is None or not t.shape:
            return []
        out = [{"pad": 1}]
        if t.shape[-1] % 16:
            out.append({"align": 16})
        return out

    def check(self, program, site, params):
        name = site.get("tensor")
        t = program.tensors.get(name)
        if t is None or t not in program.intermediates:
            return refuse(f"{name!r} is not an intermediate: a kernel argument's shape is fixed by "
                          f"its caller")
        if len(t.shape) < 1:
            return refuse(f"{name} is a scalar")
        new = self._size(t, params)
        if new is None:
            return refuse("params must be {pad: 1..16} or {align: 2..64, a power of two}")
        if new == t.shape[-1]:
            return refuse(f"the innermost dimension of {name} ({t.shape[-1]}) is already aligned")
        if t.scope == "local" and t.size // t.shape[-1] * new * ITEMSIZE[t.dtype] > MAX_LOCAL_BYTES:
            return refuse(f"the padded {name} would exceed {MAX_LOCAL_BYTES} bytes of local memory")
        return OK

    def _size(self, t: A.Tensor, params) -> int | None:
        n = t.shape[-1]
        if "pad" in params:
            p = params["pad"]
            return n + p if isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 16 else None
        if "align" in params:
            a = params["align"]
            if isinstance(a, int) and not isinstance(a, bool) and 2 <= a <= 64 and a & (a - 1) == 0:
                return -(-n // a) * a
        return None

    def rewrite(self, program, site, params):
        name = site.get("tensor")
        t = program.tensor(name)
        shape = t.shape[:-1] + (self._size(t, params),)
        inter = tuple(replace(x, shape=shape) if x.name == name else x for x in program.intermediates)
        return replace(program, intermediates=inter)


# ============================================================================ precompute indices
def _nontrivial_index(e: A.Expr) -> bool:
    """Index arithmetic worth a table: affine over two or more variables or with a coefficient
    other than +-1, or floor division / modulo of loop variables; no tensor reads."""
    if any(isinstance(n, A.Load) for n in A.walk(e)) or not A.free_vars(e):
        return False
    a = affine(e)
    if a is not None:
        return len(a[0]) >= 2 or any(abs(c) != 1 for c in a[0].values())
    return any(isinstance(n, A.Binary) and n.op in ("//", "%") for n in A.walk(e))


def _index_exprs(s: A.Assign) -> list[A.Expr]:
    seen: dict[A.Expr, None] = {}
    for n in value_nodes(s.value):
        if isinstance(n, A.Load):
            for i in n.index:
                if _nontrivial_index(i):
                    seen.setdefault(i, None)
    return list(seen)


@register
class PrecomputeIndices(Strategy):
    name = "precompute_indices"
    family = "memory"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Hoist index arithmetic out of a loop nest: a subscript such as `i*16+j` read "
                   "in a statement is computed once into an i32 table `Idx[i,j] = i*16+j` by a nest "
                   "placed before the statement's top-level nest, and the reads become gathers "
                   "`A[Idx[i,j],l]`. Only reads are rewritten (reduction targets keep plain "
                   "subscripts).")

    def sites(self, program, analysis=None):
        return [Site.make(p, [lp.var for lp in enclosing_loops(program, p)])
                for p, s in iter_stmts(program.body) if isinstance(s, A.Assign) and _index_exprs(s)]

    def params(self, program, site, rng=None):
        s = node_at(program, site.path)
        return [{"expr": format_expr(e)} for e in _index_exprs(s)] if isinstance(s, A.Assign) else []

    def _expr(self, program, site, params):
        s = node_at(program, site.path)
        if not isinstance(s, A.Assign):
            return None, None, refuse(f"no assignment at path {list(site.path)}")
        e = next((x for x in _index_exprs(s) if format_expr(x) == params.get("expr")), None)
        if e is None:
            return s, None, refuse(f"{params.get('expr')!r} is not a non-trivial subscript read by "
                                   f"{_stmt(s)}")
        return s, e, OK

    def check(self, program, site, params):
        s, e, v = self._expr(program, site, params)
        if not v.ok:
            return v
        from ..leir.analysis import interval
        loops = enclosing_loops(program, tuple(site.path))
        ranges = {lp.var: (0, lp.extent - 1) for lp in loops}
        r = interval(e, ranges)
        if r is None:
            return refuse(f"the range of {format_expr(e)} cannot be bounded")
        if r[0] < -2 ** 31 or r[1] >= 2 ** 31:
            return refuse(f"{format_expr(e)} does not fit in i32")
        size = 1
        for lp in loops:
            if lp.var in A.free_vars(e):
                size *= lp.extent
        if size > 1 << 20:
            return refuse(f"the table for {format_expr(e)} would hold {size} entries")
        return OK

    def rewrite(self, program, site, params):
        path = tuple(site.path)
        s, e, _ = self._expr(program, site, params)
        loops = [lp for lp in enclosing_loops(program, path) if lp.var in A.free_vars(e)]
        name = fresh_tensor(program, "Idx") if "Idx" in all_names(program) else "Idx"
        load = A.Load(name, tuple(A.Var(lp.var) for lp in loops))

        def f(n):
            if isinstance(n, A.Load):
                return replace(n, index=tuple(load if i == e else map_expr(i, f) for i in n.index))
            return None

        new = replace(s, value=map_expr(s.value, f))
        prog = replace_at(program, path, [new])
        table: A.Stmt = A.Assign(name, load.index, "=", A.Call("i32", (e,)))
        for lp in reversed(loops):
            table = A.Loop(lp.var, lp.extent, "serial", (table,))
        top = path[0]
        prog = replace(prog, body=prog.body[:top] + (table,) + prog.body[top:],
                       intermediates=prog.intermediates + (A.Tensor(name, "i32", tuple(lp.extent for lp in loops)),))
        return prog


__all__ = ["CacheReadWrite", "LayoutTransformation", "SetStorageScope", "SetStorageLayout",
           "PrecomputeIndices"]
