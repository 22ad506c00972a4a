"""Races of ``parallel`` loops, found exactly by enumerating the iteration space.

A race hides from verification runs (they are single-threaded, and a race that loses an update
only sometimes is still wrong), so the verifier looks for it statically. The dependence test the
strategies use to *offer* a parallelization is conservative (it ignores guards, so a split with a
tail guard under a parallel loop looks carried), which is right for offering moves and wrong for
judging a given program. Here each statement under a parallel loop is enumerated over its
iteration domain (guards applied): a race is an element of a tensor that two different iterations
of the parallel loop touch, for the same iteration of the loops outside it, at least one of them
writing it; a ``local`` buffer each iteration overwrites before reading is private to it
(``leir.private``: TVM allocates it inside the loop) and takes no part. Domains above ``LIMIT``
points, and subscripts that read tensors (gathers), fall back to the definite case only: a
reduction whose reduction axis is the parallel loop.
"""

from __future__ import annotations

import math

import numpy as np

from . import ast as A
from .analysis import _eval_np, statements
from .private import private_to

LIMIT = 4_000_000


def _fmt(tensor: str, idx) -> str:
    return f"{tensor}[{', '.join(str(int(i)) for i in idx)}]"


def parallel_races(program: A.Program) -> list[str]:
    """One sentence per racing parallel loop; [] when none races."""
    infos = statements(program)
    shapes = {t.name: t.shape for t in program.params + program.intermediates}
    loop_paths = {}
    for si in infos:
        for lp, path in zip(si.loops, si.loop_paths):
            if lp.kind == "parallel":
                loop_paths.setdefault(path, lp)
    out = []
    for path, loop in sorted(loop_paths.items()):
        under = [si for si in infos if path in si.loop_paths]
        why = _race_under(loop, path, under, shapes, private_to(program, path))
        if why:
            out.append(why)
    return out


def _groups(K: np.ndarray) -> tuple[np.ndarray, int]:
    """``np.unique(K, axis=1, return_inverse=True)``'s inverse (the same group numbers: columns
    in lexicographic order) and the group count. ``np.unique`` along an axis sorts a void view
    of the columns, 30x slower than ``lexsort`` of the rows (21 s of 22 on rmsnorm's
    parallel row loop, 2M points)."""
    n = K.shape[1]
    order = np.lexsort(K[::-1])
    srt = K[:, order]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    new[1:] = np.any(srt[:, 1:] != srt[:, :-1], axis=0)
    ids = np.cumsum(new) - 1
    group = np.empty(n, dtype=np.int64)
    group[order] = ids
    return group, int(ids[-1]) + 1 if n else 0


def _race_under(loop: A.Loop, path, under, shapes, private: frozenset[str] = frozenset()
                ) -> str | None:
    v = loop.var
    tid = {name: k for k, name in enumerate(sorted(shapes))}
    total = sum(math.prod(lp.extent for lp in si.loops) for si in under)
    exact = total <= LIMIT
    keys: list[np.ndarray] = []
    meta = []  # per chunk: (tensor, stmt, v values, write flags)
    for si in under:
        if not exact:
            break
        depth = si.loop_paths.index(path)
        outer = si.loops[:depth]
        grids = np.meshgrid(*[np.arange(lp.extent, dtype=np.int64) for lp in si.loops],
                            indexing="ij")
        env = {lp.var: g.ravel() for lp, g in zip(si.loops, grids)}
        n = int(np.prod([lp.extent for lp in si.loops]))
        mask = np.ones(n, dtype=bool)
        try:
            with np.errstate(all="ignore"):
                for g in si.guards:
                    mask &= np.broadcast_to(np.asarray(_eval_np(g, env), dtype=bool), (n,))
            okey = np.zeros(n, dtype=np.int64)
            for lp in outer:
                okey = okey * lp.extent + env[lp.var]
            accesses = [(si.stmt.tensor, si.stmt.index, True)]
            accesses += [(ld.tensor, ld.index, False) for ld in A.loads(si.stmt.value)]
            if si.stmt.is_reduction:
                accesses.append((si.stmt.tensor, si.stmt.index, False))
            for tensor, index, write in accesses:
                if tensor in private:   # each iteration has its own copy (``leir.private``)
                    continue
                shape = shapes.get(tensor, ())
                flat = np.zeros(n, dtype=np.int64)
                for d, sub in zip(shape, index):
                    flat = flat * d + np.broadcast_to(np.asarray(_eval_np(sub, env),
                                                                 dtype=np.int64), (n,))
                keys.append(np.stack([np.full(n, tid[tensor], dtype=np.int64),
                                      flat, okey])[:, mask])
                meta.append((tensor, index, si.stmt, env[v][mask], np.full(int(mask.sum()),
                                                                            write)))
        except (ValueError, KeyError, TypeError):
            exact = False
    if not exact:
        for si in under:
            if si.stmt.is_reduction and v in si.reduction_axes and not si.guards:
                return (f"parallel loop {v}: it is a reduction axis of the statement writing "
                        f"{si.stmt.tensor} (every iteration updates the same element)")
        return None
    if not keys:
        return None
    K = np.concatenate(keys, axis=1)
    V = np.concatenate([m[3] for m in meta])
    W = np.concatenate([m[4] for m in meta])
    group, g = _groups(K)
    vmin = np.full(g, np.iinfo(np.int64).max)
    vmax = np.full(g, np.iinfo(np.int64).min)
    np.minimum.at(vmin, group, V)
    np.maximum.at(vmax, group, V)
    has_w = np.zeros(g, dtype=bool)
    np.logical_or.at(has_w, group, W)
    bad = has_w & (vmin != vmax)
    if not bad.any():
        return None
    b = int(np.flatnonzero(bad)[0])
    pos = int(np.flatnonzero(group == b)[0])
    # which access that is, for the message
    start = 0
    for tensor, index, stmt, vv, _w in meta:
        if pos < start + len(vv):
            break
        start += len(vv)
    shape = shapes.get(tensor, ())
    elem = np.unravel_index(int(K[1, pos]), shape) if shape else ()
    return (f"parallel loop {v}: iterations {v}={int(vmin[b])} and {v}={int(vmax[b])} both touch "
            f"{_fmt(tensor, elem)}, and one of them writes it (`{stmt.tensor}[...] {stmt.op} ...`)")


_THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def thread_races(program: A.Program) -> list[str]:
    """What a GPU block's threads would race on, read off its structure; [] when nothing.

    Every thread of a block runs the whole kernel body, so in a kernel (a top-level nest) with
    threadIdx loops (1) a statement outside them that writes shared or global memory is run by
    every thread at once, and (2) a global tensor one thread nest writes and another reads has
    no barrier between them (TVM puts ``__syncthreads`` only around shared memory). ``local``
    buffers are each thread's own and take no part."""
    scope = {t.name: t.scope for t in program.intermediates}
    out: list[str] = []
    for k, top in enumerate(program.body):
        nests: list[A.Loop] = []
        loose: list[A.Assign] = []

        def walk(s, under: bool) -> None:
            if isinstance(s, A.Loop) and s.kind in _THREAD_AXES and not under:
                nests.append(s)
                return
            if isinstance(s, (A.Loop, A.If)):
                for b in s.body:
                    walk(b, under)
            elif isinstance(s, A.Assign) and not under:
                loose.append(s)

        walk(top, False)
        if not nests:
            continue
        for s in loose:
            if scope.get(s.tensor) != "local":
                out.append(f"`{_line(s)}` lies outside the threadIdx loops of kernel {k}: every "
                           f"thread of the block runs it, so they all write {s.tensor} at once")
                break
        writes = [{w.tensor for w in _assigns(n) if scope.get(w.tensor, "global") == "global"}
                  for n in nests]
        for a, wa in enumerate(writes):
            for b, nb in enumerate(nests):
                if a == b:
                    continue
                read = sorted(wa & {ld.tensor for s in _assigns(nb) for ld in A.loads(s.value)})
                if read:
                    out.append(f"{read[0]} is written by one thread nest of kernel {k} and read "
                               f"by another: nothing orders global memory between them (stage "
                               f"it in shared memory, or split the kernel)")
                    break
            else:
                continue
            break
    return out


def _assigns(s) -> list[A.Assign]:
    if isinstance(s, A.Assign):
        return [s]
    return [x for b in getattr(s, "body", ()) for x in _assigns(b)]


def _line(s: A.Assign) -> str:
    from .printer import format_stmt
    return format_stmt(s).strip().split("\n")[0]
