"""The CUDA search space: states that can be timed on a GPU, i.e. bound to blocks and threads.

An unbound nest does not build for CUDA at all, so a GPU state is only timed once every
top-level nest has a ``blockIdx``/``threadIdx`` loop. ``bind_all`` gives the *bound but
unoptimized* form of a kernel (each nest's outer loop on ``blockIdx.x``, the next on
``threadIdx.x`` where that is legal and within the thread limit): the GPU baseline.
``cuda_candidates`` are the one-step GPU candidates of a kernel: every legal application of a
GPU-capable strategy to the bound baseline that leaves it bound, plus every strategy applied to
the unbound kernel and then bound (a split before binding turns one loop into blocks x threads),
deduplicated by canonical text, in a deterministic order.

``tiled_schedules`` are the multi-step GPU schedules of a kernel's main nest (MetaSchedule's
multi-level tiling for GPUs, written as registered steps so every state of the chain is a
record): tile two spatial loops so that a block computes a ``t x t`` tile with one thread per
element (``loop_tiling``, ``loop_binding`` to ``blockIdx``/``threadIdx``), stage each input
region the block reads in ``shared`` memory (``cache_read_write``: filled by the block's threads
together, TVM puts the barriers in), and keep the thread's accumulator ``local``. When the
reduction is long the panels outgrow shared memory, so a second form splits it (``k_o`` outside
the threads): the block stages one ``t x k_t`` slice of each input per ``k_o``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..leir import ast as A
from ..leir.analysis import affine
from ..leir.races import thread_races
from ..strategies import registry
from ..leir.ast import iter_stmts, node_at
from ..leir.nav import band, tensors_read, tensors_written
from ..strategies.base import Site

#: Binding choices tried per nest, best first.
_BINDINGS = (["blockIdx.x", "threadIdx.x"], ["blockIdx.x"], ["threadIdx.x"])


def _nest_bound(stmt) -> bool:
    while isinstance(stmt, A.Loop):
        if stmt.kind in A.THREAD_KINDS:
            return True
        if len(stmt.body) != 1:
            return False
        stmt = stmt.body[0]
    return False


def is_bound(program: A.Program) -> bool:
    """Every top-level statement is a nest with a thread-bound loop in its perfect band."""
    return bool(program.body) and all(_nest_bound(s) for s in program.body)


@dataclass(frozen=True)
class CudaStep:
    """One registered step of a GPU schedule: what a record of that state names."""

    strategy: str
    site: Site
    params: dict


def _bind_steps(program: A.Program) -> tuple[A.Program | None, list[CudaStep]]:
    strat = registry.get("loop_binding")
    steps: list[CudaStep] = []
    for k, s in enumerate(program.body):
        if _nest_bound(s):
            continue
        if not (isinstance(s, A.Loop) and s.kind == "serial"):
            return None, steps
        site = next((st for st in strat.sites(program) if tuple(st.path) == (k,)), None)
        if site is None:
            return None, steps
        for axes in _BINDINGS:
            # the baseline stays unoptimized and exact: no cross-thread reduction
            if strat.check(program, site, {"axes": axes}).ok and strat.exactness_for(
                    program, site, {"axes": axes}) == "exact":
                program = strat.rewrite(program, site, {"axes": axes})
                steps.append(CudaStep("loop_binding", site, {"axes": list(axes)}))
                break
        else:
            return None, steps
    return program, steps


def bind_all(program: A.Program) -> A.Program | None:
    """Bind every unbound top-level nest (see the module docstring); None when some nest
    cannot be bound."""
    return _bind_steps(program)[0]


def _new_bound(prog: A.Program | None, seen: set[str]) -> str | None:
    """``prog``'s canonical text when it is a GPU state worth timing (bound, no block races) not
    ``seen`` before (it is added), else None."""
    if prog is None or not is_bound(prog) or thread_races(prog):
        return None
    text = registry.canonical(prog)
    if text in seen:
        return None
    seen.add(text)
    return text


@dataclass(frozen=True)
class CudaCandidate:
    program: A.Program
    strategy: str
    site: Site | None
    params: dict
    exactness: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.strategy}{self.params}" if self.params else self.strategy


def cuda_candidates(program: A.Program, seed: int = 0, max_per_site: int | None = 2,
                    limit: int | None = None) -> list[CudaCandidate]:
    """One-step GPU candidates of ``program`` (bound, buildable in principle), deduplicated."""
    base = bind_all(program)
    if base is None:
        return []
    seen = {registry.canonical(base)}
    out: list[CudaCandidate] = []

    def keep(prog, c):
        text = _new_bound(prog, seen)
        if text is None:
            return
        out.append(CudaCandidate(prog, c.strategy, c.site, dict(c.params), c.exactness, text))

    for c in registry.candidates(base, target="gpu", seed=seed, max_per_site=max_per_site):
        keep(c.program, c)
    for c in registry.candidates(program, target="gpu", seed=seed, max_per_site=max_per_site):
        if c.strategy == "loop_binding":
            continue
        keep(bind_all(c.program), c)
    return out[:limit] if limit is not None else out


@dataclass(frozen=True)
class CudaSchedule:
    """A multi-step GPU schedule: the program after ``steps`` (applied in order to the kernel)."""

    program: A.Program
    steps: tuple[CudaStep, ...]
    label: str
    exactness: str
    text: str


class _Chain:
    def __init__(self, program: A.Program):
        self.program = program
        self.steps: list[CudaStep] = []
        self.exactness = "exact"

    def apply(self, name: str, path, loops, params: dict, **site_kw) -> bool:
        strat = registry.get(name)
        site = Site.make(tuple(path), list(loops), **site_kw)
        if not strat.check(self.program, site, params).ok:
            return False
        ex = strat.exactness_for(self.program, site, params)
        if ex != "exact":
            self.exactness = ex
        self.program = strat.rewrite(self.program, site, params)
        self.steps.append(CudaStep(name, site, dict(params)))
        return True

    def copy(self) -> "_Chain":
        c = _Chain(self.program)
        c.steps, c.exactness = list(self.steps), self.exactness
        return c


def _main_nest(program: A.Program) -> int | None:
    """The top-level nest to tile: the first with a reduction and two spatial loops in its band
    above it, else the first with a band of two loops or more."""
    best = None
    for k, s in enumerate(program.body):
        if not (isinstance(s, A.Loop) and s.kind == "serial"):
            continue
        loops = band(program, (k,))
        if len(loops) < 2:
            continue
        reduces = any(isinstance(x, A.Assign) and x.is_reduction for _, x in iter_stmts([s]))
        if reduces:
            return k
        if best is None:
            best = k
    return best


def _block_axes(n: int) -> list[str]:
    """The grid axes of ``n`` nested loops, outermost first (x innermost)."""
    return list(A.BLOCK_KINDS[::-1][3 - n:])


def _stage_reads(chain: _Chain, path, loop_var: str, suffix: list[str]) -> None:
    """Stage every tensor the block reads under the loop at ``path`` and its kernel does not
    write (inputs, an earlier kernel's output) in shared memory, in order of first read, as
    long as each fits (the strategy checks the 48 KiB)."""
    loop = node_at(chain.program, tuple(path))
    written = tensors_written(chain.program.body[path[0]])
    tvars = {x.var for _, x in iter_stmts(loop.body) if isinstance(x, A.Loop)
             and x.kind in A.THREAD_AXES}
    for t in tensors_read(loop):
        if t in written or not _shared_by_threads(loop, t, tvars):
            continue
        if chain.apply("cache_read_write", path, [loop_var], {"scope": "shared"},
                       tensor=t, mode="read"):
            suffix.append(t)


def _shared_by_threads(loop: A.Loop, tensor: str, tvars: set[str]) -> bool:
    """Do several threads of the block read the same elements of ``tensor`` (some read of it
    does not move with every thread index)? Staging what each thread reads alone only adds a
    copy and a barrier."""
    inner = {x.var for _, x in iter_stmts(loop.body) if isinstance(x, A.Loop)} - tvars
    for x in _assigns(loop):
        for ld in A.walk(x.value):
            if not (isinstance(ld, A.Load) and ld.tensor == tensor):
                continue
            used = {v for i in ld.index for v in A.free_vars(i)}
            if not tvars <= used:
                return True
            # a window: a thread index and a loop inside the thread with one step (x + m)
            for i in ld.index:
                f = affine(i)
                if f is not None and any(f[0].get(t) == f[0].get(v) for t in tvars & set(f[0])
                                         for v in inner & set(f[0])):
                    return True
    return False


def tiled_schedules(program: A.Program, tiles: tuple[int, ...] = (16, 32), k_tile: int = 16,
                    reg_tiles: tuple[tuple[int, int, bool], ...] = (
                        (16, 1, False), (32, 2, False), (64, 4, False), (32, 2, True),
                        (64, 4, True)),
                    row_threads: tuple[int, ...] = (128, 256, 512)
                    ) -> list[CudaSchedule]:
    """The multi-step GPU schedules of ``program`` (see the module docstring), deterministic:
    per tile size, the tiled + bound state, then with the inputs staged in shared memory, then
    with the accumulator local; and the split-reduction form with its slices staged."""
    k = _main_nest(program)
    if k is None:
        return []
    out: list[CudaSchedule] = []
    seen: set[str] = set()

    def emit(chain: _Chain, label: str) -> None:
        prog, bind = _bind_steps(chain.program)
        text = _new_bound(prog, seen)
        if text is None:
            return
        out.append(CudaSchedule(prog, tuple(chain.steps + bind), label, chain.exactness, text))

    loops = band(program, (k,))
    spatial = [lp for lp in loops if not _is_reduction_loop(program, k, lp.var)]
    reduction = [lp for lp in loops if lp not in spatial]
    if len(spatial) == 1 and len(reduction) == 1 and loops[-1] is reduction[0]:
        for t in row_threads:
            _row_reduction(program, k, loops, t, emit)
        return out
    if len(spatial) < 2 or len(spatial) > 3:   # three grid axes: z, y, x
        return out
    a, b = spatial[-2], spatial[-1]
    n_outer = len(spatial) - 2
    for t in tiles:
        if a.extent % t or b.extent % t or t * t > 1024 or a.extent == t or b.extent == t:
            continue
        c = _Chain(program)
        if not c.apply("loop_tiling", (k,), [lp.var for lp in loops],
                       {"loops": [a.var, b.var], "factors": [t, t]}):
            continue
        axes = _block_axes(n_outer + 2) + ["threadIdx.y", "threadIdx.x"]
        tl = band(c.program, (k,))
        if not c.apply("loop_binding", (k,), [lp.var for lp in tl[:2]], {"axes": axes}):
            continue
        emit(c, f"tile {t}x{t}, bound")
        inner_block = (k,) + (0,) * (n_outer + 1)     # the last blockIdx loop
        staged = c.copy()
        names: list[str] = []
        _stage_reads(staged, inner_block, tl[n_outer + 1].var, names)
        if names:
            emit(staged, f"tile {t}x{t}, {' and '.join(names)} in shared")
        tvar = tl[n_outer + 3].var
        for base, tag in ((staged, f"tile {t}x{t}, {' and '.join(names)} in shared"
                           if names else f"tile {t}x{t}"), (c, f"tile {t}x{t}")):
            acc = base.copy()
            thread = _path_of(acc.program, tvar)
            written = [x.tensor for x in _assigns(node_at(acc.program, thread)) if x.is_reduction]
            if written and acc.apply("cache_read_write", thread, [tvar], {"scope": "local"},
                                     tensor=written[0], mode="write"):
                emit(acc, f"{tag}, accumulator local")
    # the split reduction: k_o outside the threads, a T x k_tile slice of each input staged per
    # k_o, each thread computing an r x r tile of outputs in a local accumulator
    if len(reduction) == 1 and len(loops) == len(spatial) + 1 and reduction[0] is loops[-1]:
        for T, r, interleaved in reg_tiles:
            _split_reduction(program, k, loops, a, b, n_outer, T, r, interleaved, k_tile, emit)
    return out


def _row_reduction(program, k, loops, t, emit) -> None:
    """A row per block, its reduction over ``t`` threads: split the reduction ``j`` into
    ``j_i`` (t) outside ``j_o``, so thread ``j_i`` reads every t-th element (neighbouring
    threads, neighbouring addresses), each thread sums its part and the block's threads
    combine their sums (TVM's cross-thread reduction)."""
    red = loops[-1]
    if red.extent % t or red.extent < 2 * t or t > 1024:
        return
    c = _Chain(program)
    rpath = (k,) + (0,) * (len(loops) - 1)
    if not c.apply("loop_split", rpath, [red.var], {"factor": t}):
        return
    sl = band(c.program, rpath)
    if not c.apply("loop_reorder", rpath, [lp.var for lp in sl],
                   {"order": [sl[1].var, sl[0].var]}):
        return
    if not c.apply("loop_binding", (k,), [loops[0].var], {"axes": ["blockIdx.x"]}):
        return
    if not c.apply("loop_binding", rpath, [sl[1].var], {"axes": ["threadIdx.x"]}):
        return
    emit(c, f"a row per block, its reduction over {t} threads")


def _split_reduction(program, k, loops, a, b, n_outer, T, r, interleaved, k_tile, emit) -> None:
    """One split-reduction schedule: a ``T x T`` block tile, ``r x r`` outputs per thread
    (``interleaved``: a thread's outputs ``T/r`` apart, so neighbouring threads read and write
    neighbouring elements; else ``r`` adjacent ones)."""
    red = loops[-1]
    if (red.extent % k_tile or red.extent == k_tile or a.extent % T or b.extent % T
            or a.extent == T or b.extent == T or T % r or (T // r) ** 2 > 1024):
        return
    c = _Chain(program)
    if not c.apply("loop_split", (k,) + (0,) * (len(loops) - 1), [red.var], {"factor": k_tile}):
        return
    sl = band(c.program, (k,))
    if not c.apply("loop_tiling", (k,), [lp.var for lp in sl],
                   {"loops": [a.var, b.var], "factors": [T, T], "point": "inner",
                    "above": sl[-1].var}):
        return
    ko = (k,) + (0,) * (n_outer + 2)
    if r > 1:
        sl = band(c.program, (k,))
        ai, bi = sl[n_outer + 3].var, sl[n_outer + 4].var
        f = T // r if interleaved else r
        if not c.apply("loop_tiling", ko + (0,), [ai, bi, sl[-1].var],
                       {"loops": [ai, bi], "factors": [f, f], "point": "inner"}):
            return
        if interleaved:
            # the point loops (T/r each) become the threads, the tile loops (r) go inside
            names = [lp.var for lp in band(c.program, ko + (0,))]
            if not c.apply("loop_reorder", ko + (0,), names,
                           {"order": [names[3], names[4], names[2], names[0], names[1]]}):
                return
    sl = band(c.program, (k,))
    if not c.apply("loop_binding", (k,), [lp.var for lp in sl[:2]],
                   {"axes": _block_axes(n_outer + 2)}):
        return
    if not c.apply("loop_binding", ko + (0,), [sl[n_outer + 3].var, sl[n_outer + 4].var],
                   {"axes": ["threadIdx.y", "threadIdx.x"]}):
        return
    tag = f"tile {T}x{T}" + (f" of {r}x{r} per thread" if r > 1 else "") + \
        (f" {T // r} apart" if interleaved else "") + \
        f", reduction split by {k_tile}"
    names: list[str] = []
    _stage_reads(c, ko, sl[n_outer + 2].var, names)
    if names:
        tag += f", {' and '.join(names)} slices in shared"
        emit(c, tag)
    acc = [x.tensor for x in _assigns(program.body[k]) if x.is_reduction][0]
    block = (k,) + (0,) * (n_outer + 1)
    if c.apply("cache_read_write", block, [sl[n_outer + 1].var], {"scope": "local"},
               tensor=acc, mode="write"):
        emit(c, f"{tag}, accumulators local")


def _assigns(stmt) -> list[A.Assign]:
    return [x for _, x in iter_stmts([stmt]) if isinstance(x, A.Assign)]


def _is_reduction_loop(program: A.Program, k: int, var: str) -> bool:
    """Is the band loop ``var`` (it encloses every statement of nest ``k``) a reduction axis of
    one of them (absent from a reduction's left-hand side)?"""
    return any(x.is_reduction and var not in {v for i in x.index for v in A.free_vars(i)}
               for x in _assigns(program.body[k]))


def _path_of(program: A.Program, var: str) -> tuple[int, ...]:
    return next(tuple(p) for p, x in iter_stmts(program.body)
                if isinstance(x, A.Loop) and x.var == var)


__all__ = ["CudaCandidate", "CudaSchedule", "CudaStep", "bind_all", "cuda_candidates", "is_bound",
           "tiled_schedules"]
