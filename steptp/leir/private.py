"""Which ``local`` buffers are private to each iteration of a loop.

A ``local`` intermediate whose every access lies inside one loop, and which that loop's body
overwrites whole before anything reads it, holds nothing from one iteration to the next: each
iteration may have its own copy. TVM allocates a buffer at the innermost scope enclosing all of
its accesses, so inside a ``parallel`` loop each thread gets its own copy (on the stack, where
LLVM keeps a small one in registers: a register tile's accumulators, which it may leave in
memory when they live in a global buffer that the parallel closure reaches through pointers it
cannot prove unaliased). That makes such a buffer no dependence of the loop, and the only kind
of buffer whose same elements a parallel loop's iterations may all write:
``loop_parallelization`` leaves it out of the dependence test, the verifier's race check
(``leir.races``) too, and ``cache_read_write`` may stage into one under a parallel loop.
"""

from __future__ import annotations

from . import ast as A

Path = tuple[int, ...]


def _touches(s: A.Stmt, name: str) -> bool:
    return any((isinstance(n, A.Load) and n.tensor == name)
               or (isinstance(n, A.Assign) and n.tensor == name) for n in A.walk(s))


def _overwrites(s: A.Stmt, t: A.Tensor) -> bool:
    """Is ``s`` a nest that stores every element of ``t`` once, reading nothing of ``t``?
    (``for c0 in N0, c1 in N1: T[c0,c1] = e``, the shape of a staging buffer's fill or copy-in.)"""
    loops: list[A.Loop] = []
    while isinstance(s, A.Loop) and len(s.body) == 1:
        loops.append(s)
        s = s.body[0]
    if not isinstance(s, A.Assign) or s.tensor != t.name or s.op != "=":
        return False
    if any(isinstance(n, A.Load) and n.tensor == t.name for n in A.walk(s.value)):
        return False
    if len(s.index) != len(t.shape) or len(loops) != len(t.shape):
        return False
    for e, lp, n in zip(s.index, loops, t.shape):
        if not (isinstance(e, A.Var) and e.name == lp.var and lp.extent == n):
            return False
    return True


def private_to(program: A.Program, path: Path) -> frozenset[str]:
    """The ``local`` intermediates private to each iteration of the loop at ``path``: every
    access of the buffer lies in one loop at or inside it whose body overwrites the whole buffer
    (``_overwrites``) before its first other access."""
    path = tuple(path)
    out = []
    for t in program.intermediates:
        if t.scope != "local":
            continue
        at = [p for p, s in A.iter_stmts(program.body) if not isinstance(s, (A.Loop, A.If))
              and _touches(s, t.name)]
        if not at or any(p[:len(path)] != path for p in at):
            continue
        # the innermost statement enclosing every access: its body must start by overwriting
        common = at[0]
        for p in at[1:]:
            k = 0
            while k < min(len(common), len(p)) and common[k] == p[k]:
                k += 1
            common = common[:k]
        # climb to a loop (an access itself or a guard is no scope of its own here)
        node = None
        while len(common) >= len(path):
            node = A.node_at(program, common)
            if isinstance(node, A.Loop) and len(common) > 0:
                break
            common = common[:-1]
        if not isinstance(node, A.Loop) or len(common) < len(path):
            continue
        first = next((s for s in node.body if _touches(s, t.name)), None)
        if first is not None and _overwrites(first, t):
            out.append(t.name)
    return frozenset(out)

