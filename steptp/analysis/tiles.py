"""What a schedule's tiles look like in a LEIR program: the register tile's row loop, the loop
right around a cache tile's reduction, and the vector lanes a tensor's element type fills.

The search offers tilings by these shapes (``steptp.search.space``) and the reasoning names them
(``steptp.cot.template``); both read them here.
"""

from __future__ import annotations

import math

from ..leir import ast as A
from ..leir.analysis import ITEMSIZE
from ..leir.nav import perfect_nest
from .cost_model import REGISTERS

VECTOR_BYTES = 64           # one AVX-512 register; the column tile is half of one to four of them


def vars_of(index) -> set[str]:
    """The loop variables a subscript tuple mentions."""
    return {v for e in index for v in A.free_vars(e)}


def lanes_of(program: A.Program, tensor: str) -> int:
    """Elements of ``tensor`` one vector register holds."""
    return max(1, VECTOR_BYTES // ITEMSIZE.get(program.tensors[tensor].dtype, 4))


def rows_between(loops: list[A.Loop], lhs: set[str]) -> bool:
    """Does a loop the result is indexed by (a row loop) lie between the reduction loops of a
    perfect nest (``loops``, outermost first): a cache tile's row tiles inside a block of the
    reduction?"""
    reduced = [k for k, lp in enumerate(loops) if lp.var not in lhs]
    return bool(reduced) and any(lp.var in lhs for lp in loops[reduced[0]:reduced[-1]])


def reduction_right_inside(program: A.Program, path: tuple[int, ...]):
    """The loop at ``path`` holding one perfect nest of a reduction that starts with a
    reduction loop: (its loops, the statement, the variables of its left-hand side); else
    None."""
    loop = A.node_at(program, path)
    if not isinstance(loop, A.Loop) or len(loop.body) != 1:
        return None
    nest = perfect_nest(loop.body[0])
    if nest is None or not nest[0] or not nest[1].is_reduction:
        return None
    loops, st = nest
    lhs = {v for e in st.index for v in A.free_vars(e)}
    return None if loops[0].var in lhs else (loops, st, lhs)


def around_cache_tile(program: A.Program, path: tuple[int, ...]) -> bool:
    """Is the loop at ``path`` right around a cache tile's reduction (its body one perfect
    nest of a reduction, starting with a reduction loop, with a row loop between the reduction
    loops)? Its stage holds the accumulators of every row tile inside it."""
    nest = reduction_right_inside(program, path)
    return nest is not None and rows_between(nest[0], nest[2])


def tile_row(program: A.Program, loop) -> bool:
    """Is ``loop`` the row loop of a staged register tile: a serial loop whose body is one
    vectorized loop of updates of a ``local`` buffer that read their own element, the loop
    indexing that buffer, with at most ``REGISTERS - 4`` vector registers of accumulators (see
    ``steptp.search.space.unrolls_tile_rows``)?"""
    if not isinstance(loop, A.Loop) or loop.kind != "serial" or len(loop.body) != 1:
        return False
    vec = loop.body[0]
    if not isinstance(vec, A.Loop) or vec.kind != "vectorized" \
            or not all(isinstance(b, A.Assign) for b in vec.body):
        return False
    for st in vec.body:
        t = program.tensors.get(st.tensor)
        if t is None or getattr(t, "scope", None) != "local" or loop.var not in vars_of(st.index):
            return False
        if not any(ld.tensor == st.tensor and ld.index == st.index for ld in A.loads(st.value)):
            return False
        regs = loop.extent * math.ceil(vec.extent / lanes_of(program, st.tensor))
        if regs > REGISTERS - 4:
            return False
    return True
