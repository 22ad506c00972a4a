"""The argument from the prompt to the step: what limits the site's statement, which of those
limits the step answers, and what it can be expected to gain, every figure computable from the
program and the hardware line by the rules below.

    found = site_findings(f)            # what limits the statement the step acts on
    kind = answered(f)                  # the finding the step answers (None: it answers none)
    prep = preparation(f)               # or: the later step it makes possible, and why

The reasoning's bottleneck is a finding at the step's own site (never a statement elsewhere in
the program), and the step is chosen because it answers it — or because it prepares a move that
does. A step that answers nothing found at its site and prepares nothing derivable has no
argument: the template still writes its facts, :mod:`steptp.cot.coherence` marks it incoherent,
and curation keeps it out of the SFT set (it stays in the all-steps table and may be a pair's
rejected side).

The rules, in the order they are listed (each about the site's main statement, the heaviest
assignment at or below the site):

* ``locality`` — an access moves by more than one element along the innermost loop (stride in
  elements, and in bytes against the cache line; when it takes a new line every iteration, also
  the outer loop that reads the next element of the same line and the bytes of lines touched
  before it does); or a read comes back across an outer loop with more than L1 of other data
  in between (the reuse distance). A step answers a strided walk when it ends it, or (a tiling)
  when the line's next element is then read before more than L1 of lines pass;
* ``parallelism`` — no loop of the nest is parallel, and the outermost loop of more than one
  iteration is serial, carries no dependence and has at least as many iterations as cores;
* ``vectorization`` — the innermost loop is serial (or unrolled), not a reduction or scan axis,
  at least 2 iterations, and every access moves by a constant stride along it (a non-unit one
  makes its lanes a gather or scatter, which the text says);
* ``dependence`` — the innermost loop is the statement's reduction axis (one serial chain of
  updates) or carries a scan;
* ``structure`` — an intermediate the nest writes or reads is written whole by one top-level
  nest and read by another (produced long before it is used);
* ``memory`` — one run of the whole nest touches more than L2 holds (per core);
* ``loop_overhead`` — the innermost loop is serial and short (at most ``SHORT_LOOP``);
* ``compute`` — beside any other finding: costly operations in every iteration (math-library
  calls, divisions; ``steptp.cot.facts.costly_ops``), which a rewrite answers only when the
  statement and the whole program then evaluate fewer of them (or as many and fewer operations
  in all); a computed subexpression that occurs more than once in the statement (evaluated that
  many times per iteration), which only sharing it answers (``SHARES_SUBEXPRESSIONS``); and,
  when nothing else is found and no operation is costly, the arithmetic itself.

Cache levels: L1 and L2 are per core; a last-level figure is used only when it is plausible for
the core count (:meth:`steptp.cot.facts.Hardware.l3_plausible`), else data beyond L2 is "beyond
L2" (a VM that reports its host's whole L3 to two cores is common).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

SHORT = 16   # the same bound as steptp.cot.claims.SHORT_LOOP (short loops' control shows)

#: bottleneck kind -> the strategies that answer it (a step "acts on" the limit it answers)
ANSWERS: dict[str, frozenset[str]] = {
    "locality": frozenset({"loop_reorder", "loop_tiling", "tensor_split_to_decouple_operators",
                           "layout_transformation",
                           "set_storage_layout", "cache_read_write", "compute_at",
                           "reverse_compute_at"}),
    "parallelism": frozenset({"loop_parallelization", "loop_collapse", "loop_binding"}),
    "vectorization": frozenset({"loop_vectorization"}),
    "dependence": frozenset({"reduction_factorization", "loop_reorder", "loop_tiling",
                             "cache_read_write", "additive_split"}),
    "structure": frozenset({"compute_at", "reverse_compute_at", "compute_inline", "operator_fusion",
                            "loop_fusion", "dead_code_elimination", "online_softmax",
                            "flashattention_wo_tiling", "tensor_concat_to_fuse_operators",
                            "set_storage_scope"}),
    "memory": frozenset({"loop_tiling", "cache_read_write", "compute_at", "reverse_compute_at",
                         "compute_inline", "operator_fusion", "loop_fusion", "online_softmax",
                         "flashattention_wo_tiling", "set_storage_scope"}),
    "loop_overhead": frozenset({"loop_unrolling", "loop_collapse", "loop_fusion"}),
    "compute": frozenset({"common_subexpression_elimination", "precompute_indices",
                          "exponential_split", "multiplicative_split", "factorization",
                          "cancellation", "collect", "powsimp", "together", "apart", "logsimp",
                          "expand_cancellation", "expand_collect", "expand_factorization",
                          "expand_log", "expand_powsimp", "partially_equivalent_then_correct",
                          "normal_loop_max_to_prefix_max",
                          "normal_loop_summation_on_exp_to_prefix_summation_on_exp",
                          "expression_reorder", "expression_splitting"}),
}

ORDER = ("locality", "parallelism", "vectorization", "dependence", "structure", "memory",
         "loop_overhead", "compute")


def answers(strategy: str, kind: str) -> bool:
    return strategy in ANSWERS.get(kind, frozenset())


@dataclass(frozen=True)
class Finding:
    """One limit of the site's statement, with the prompt-derived figures that show it."""

    kind: str
    loop: Optional[str] = None
    tensor: Optional[str] = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Preparation:
    """The later move a step makes possible: ``strategy`` at ``loops``, and the derivable reason
    it needs this step first (``why``: "no_site" — it has no legal site before the step — or
    "new_loop" — its loop is one the step creates, with ``extent`` iterations)."""

    strategy: str
    loops: tuple[str, ...]
    why: str
    extent: Optional[int]
    finding: Finding


def _nest_loops(f) -> list:
    """The LoopFacts of the site statement's own nest, outermost first."""
    m = f.at_site.main
    out = []
    for v in m.loops:
        own = [lp for lp in f.before.loops if lp.var == v and m.path[:len(lp.path)] == lp.path]
        if own:
            out.append(own[-1])
    return out


def _intermediate_split(f, names: set[str]) -> list[str]:
    """Intermediates among ``names`` that one top-level nest writes and another reads."""
    out = []
    for t in sorted(names):
        tf = f.before.tensors.get(t)
        if tf is None or tf.role != "intermediate":
            continue
        writers = {s.path[0] for s in f.before.statements if s.tensor == t}
        readers = {s.path[0] for s in f.before.statements
                   if any(a.tensor == t and not a.write for a in s.accesses)}
        if writers and readers and readers - writers:
            out.append(t)
    return out


def site_findings(f) -> list[Finding]:
    """Every limit the rules find at the site's main statement, in ``ORDER``."""
    sf, hw = f.at_site, f.hardware
    if sf is None or hw is None:
        return []
    m = sf.main
    loops = _nest_loops(f)
    inner = loops[-1] if loops else None
    out: list[Finding] = []
    # locality: a strided walk along the innermost loop
    for a in sf.accesses:
        if inner is not None and a.stride is not None and abs(a.stride) > 1:
            sb = a.stride_bytes or 0
            det = {"access": a.text, "stride": abs(a.stride), "stride_bytes": abs(sb),
                   "new_line": abs(sb) >= hw.line_bytes}
            if a.line_loop is not None and a.line_apart is not None:
                # the rest of each line is read only when the loop outside comes round again
                det.update(line_loop=a.line_loop, line_apart=a.line_apart,
                           line_level=hw.level(a.line_apart))
            out.append(Finding("locality", inner.var, a.tensor, det))
            break
    else:
        # locality: a read that comes back with more than L1 of other data in between
        far = [a for a in sf.accesses if not a.write and a.reuse_loop is not None
               and (a.reuse_bytes or 0) > hw.l1_bytes]
        if far:
            a = max(far, key=lambda x: (x.reuse_bytes, x.text))
            out.append(Finding("locality", a.reuse_loop, a.tensor,
                               {"access": a.text, "reuse_bytes": a.reuse_bytes,
                                "level": hw.level(a.reuse_bytes)}))
    # parallelism
    if loops and hw.cores > 1 and not any(lp.kind == "parallel" or lp.kind.startswith(
            ("blockIdx", "threadIdx")) for lp in loops):
        first = next((lp for lp in loops if lp.extent > 1), None)
        if first is not None and first.kind == "serial" and first.extent >= hw.cores \
                and not first.carries_dependence and first.var not in m.reduction_axes:
            out.append(Finding("parallelism", first.var, None,
                               {"extent": first.extent, "cores": hw.cores}))
    # vectorization
    if inner is not None and inner.kind in ("serial", "unrolled") and inner.extent >= 2 \
            and inner.var not in m.reduction_axes and not inner.carries_dependence \
            and sf.accesses and all(a.stride is not None for a in sf.accesses):
        dt = f.before.tensors[m.tensor].dtype if m.tensor in f.before.tensors else "float32"
        out.append(Finding("vectorization", inner.var, None,
                           {"extent": inner.extent, "lanes": hw.lanes(dt),
                            "strided": [a.text for a in sf.accesses if abs(a.stride) > 1]}))
    # dependence
    if inner is not None and inner.kind != "vectorized":
        if inner.var in m.reduction_axes:
            out.append(Finding("dependence", inner.var, m.tensor, {"extent": inner.extent}))
        elif inner.carries_dependence:
            out.append(Finding("dependence", inner.var, m.tensor,
                               {"extent": inner.extent, "scan": True}))
    # structure: an intermediate produced by one nest and read by another
    names = {a.tensor for s in sf.statements for a in s.accesses} | {s.tensor for s in sf.statements}
    split = _intermediate_split(f, names)
    own = (f.site or {}).get("tensor")
    split = [t for t in split if t == own] + [t for t in split if t != own]
    if split:
        t = f.before.tensors[split[0]]
        out.append(Finding("structure", None, t.name, {"bytes": t.bytes, "level": hw.level(t.bytes)}))
    # memory
    if sf.working_sets and sf.working_sets[0].bytes > hw.l2_bytes:
        ws = sf.working_sets[0]
        out.append(Finding("memory", ws.loop, None, {"bytes": ws.bytes, "level": hw.level(ws.bytes)}))
    # loop overhead
    if inner is not None and inner.kind == "serial" and inner.extent <= SHORT:
        out.append(Finding("loop_overhead", inner.var, None, {"extent": inner.extent}))
    plain = not out
    # compute: costly operations (math-library calls, divisions) in every iteration
    if sf.work is not None:
        w = sf.work
        out.append(Finding("compute", None, None, {"work": dict(w.costly), "costly": w.n_costly,
                                                    "ops": w.ops}))
    if plain and sf.work is None:
        # nothing else limits the site: its arithmetic does (with costly operations, only a
        # rewrite that evaluates fewer of them answers that)
        out.append(Finding("compute", None, None,
                           {"intensity": f.before.arithmetic_intensity}))
    # compute: the same subexpression evaluated several times in each iteration
    if sf.repeated is not None:
        text, ops, times, _ = sf.repeated
        out.append(Finding("compute", None, None, {"repeated": text, "ops": ops, "times": times}))
    return out


def _removes_stride(f, x: Finding) -> bool:
    """A step said to answer a strided walk must end it: the access then moves by at most one
    element, and no other access of the statement takes its place with a larger stride (a
    reorder that trades `B[k,j]` stride 4 for `A[i,k]` stride 256 answers nothing). Unknown
    after-strides (a rewrite the matching cannot follow) are not held against it."""
    accs = f.at_site.accesses
    a = next((a for a in accs if a.text == x.detail["access"]), None)
    if a is None or a.stride_after is None:
        return True
    if abs(a.stride_after) > 1:
        return False
    before = sum(1 for b in accs if b.stride is not None and abs(b.stride) > 1)
    after = sum(1 for b in accs if b.stride_after is not None and abs(b.stride_after) > 1)
    return after < before


#: what answers a subexpression evaluated several times per iteration (and only that does)
SHARES_SUBEXPRESSIONS = frozenset({"common_subexpression_elimination"})

#: what answers a strided walk that stays strided: blocks small enough that a line fetched for
#: one element is still in L1 when the loop outside reads its next element (a transpose's tiles,
#: or its nest split in two halves along the strided loop: two tiles)
KEEPS_LINES = frozenset({"loop_tiling", "tensor_split_to_decouple_operators"})


def keeps_lines(f, x: Finding) -> bool:
    """The step leaves the strided walk ``x`` in place, but the next element of each line it
    fetches is read after no more than L1 of lines, where before more than L1 passed in
    between (each line came back from a farther level for one element)."""
    if f.strategy not in KEEPS_LINES or "stride" not in x.detail or not x.detail.get("new_line"):
        return False
    a = next((a for a in f.at_site.accesses if a.text == x.detail["access"]), None)
    hw = f.hardware
    return (a is not None and hw is not None and a.line_apart is not None
            and a.line_apart > hw.l1_bytes and a.line_apart_after is not None
            and a.line_apart_after <= hw.l1_bytes)


def ends_strided_walk(f, x: Finding) -> bool:
    """The step answers the strided walk ``x``: it ends it, or keeps its lines in L1 until
    their next element is read (:func:`keeps_lines`)."""
    return _removes_stride(f, x) or keeps_lines(f, x)


def _fewer_evaluations(f) -> bool:
    """The statement evaluates its repeated subexpression fewer times after the step."""
    rep = f.at_site.repeated
    return rep is not None and rep[3] is not None and rep[3] < rep[2]


def _brings_reuse_closer(f) -> bool:
    """Some read of the statement comes back after fewer bytes of other data than before."""
    return any(not a.write and a.reuse_bytes and a.reuse_bytes_after is not None
               and a.reuse_bytes_after < a.reuse_bytes for a in f.at_site.accesses)


def may_answer(strategy: str, x: Finding) -> bool:
    """Whether ``strategy`` answers ``x`` as far as shows before its own result is known: it
    answers the kind, a repeated subexpression is answered by sharing and sharing answers
    nothing else, and a saving of costly operations shows only in the rewrite's result
    (:func:`answered` reads it there)."""
    if not answers(strategy, x.kind):
        return False
    if x.kind == "compute" and ("repeated" in x.detail) != (strategy in SHARES_SUBEXPRESSIONS):
        return False
    return "work" not in x.detail


def answered(f) -> Optional[Finding]:
    """The first finding at the site the step's strategy answers and, for a strided walk, that
    the step really ends or keeps in L1 (:func:`ends_strided_walk`; None: it answers none)."""
    for x in site_findings(f):
        if not answers(f.strategy, x.kind):
            continue
        if x.kind == "compute" and ("repeated" in x.detail) != (f.strategy in SHARES_SUBEXPRESSIONS):
            continue   # sharing answers a repeated subexpression, and answers nothing else
        if x.kind == "compute" and "repeated" in x.detail and not _fewer_evaluations(f):
            continue
        if x.kind == "compute" and "work" in x.detail and not f.at_site.work.less:
            continue   # the rewrite leaves as many costly operations (and no fewer in all)
        if x.kind == "locality" and "stride" in x.detail and not ends_strided_walk(f, x):
            continue
        if x.kind in ("memory", "locality") and "stride" not in x.detail \
                and f.strategy in ("loop_tiling", "loop_reorder") and not _brings_reuse_closer(f):
            continue   # a new traversal order with no reuse brought nearer keeps the traffic
        if x.kind == "dependence" and f.strategy in ("loop_reorder", "loop_tiling") \
                and f.at_site.innermost_after in (None, x.loop):
            continue   # the chain is still the innermost loop after the step
        return x
    return None


#: the loop kinds one loop cannot hold at once (a parallel loop is not also the vector lanes),
#: and the move that gives a loop to each
ENABLED_BY_KIND = {"parallelism": "loop_parallelization", "vectorization": "loop_vectorization"}
SHARE_ONE_LOOP = tuple(ENABLED_BY_KIND)


def split_halves(f):
    """The two loops a split creates (outer, inner: ``LoopFact`` of the after-program), or None."""
    if f.after is None:
        return None
    new = sorted((lp for lp in f.after.loops if lp.var not in f.before.loop_vars),
                 key=lambda lp: len(lp.path))
    return tuple(new) if len(new) == 2 else None


def _both_limits(f) -> Optional[Preparation]:
    """A split of the one loop that both the cores and the vector lanes would take (the site
    finds its parallelism and its vectorization limits on that same loop): parallel and
    vectorized cannot be the same loop, and the split gives the outer loop to the cores and the
    inner one to the lanes. The move it prepares is the finishing move after it when that acts
    on one of the two new loops, else the parallelization of the outer one."""
    if f.strategy != "loop_split":
        return None
    v = (f.site.get("loops") or [None])[0]
    on_v = {x.kind: x for x in site_findings(f) if x.loop == v and x.kind in SHARE_ONE_LOOP}
    halves = split_halves(f)
    if len(on_v) < 2 or halves is None:
        return None
    fu = f.follow_up
    kind = next((k for k, st in ENABLED_BY_KIND.items() if fu is not None and st == fu.strategy), None)
    on = tuple(fu.site.get("loops") or ()) if kind else ()
    lp = next((h for h in halves if (h.var,) == on), None)
    if lp is None:       # the finishing move is not on a half: the outer one goes to the cores
        kind, lp = "parallelism", halves[0]
    return Preparation(ENABLED_BY_KIND[kind], (lp.var,), "both_limits", lp.extent, on_v[kind])


def preparation(f) -> Optional[Preparation]:
    """The move the step makes possible, when the step answers nothing at its site itself: the
    best finishing move after it (``f.follow_up``) that answers a finding at the site, had no
    legal application on the site statement's nest before the step, and either had no legal
    site at all before it or acts on a loop the step creates; or, for a split of the one loop
    the cores and the lanes both need, the move on one of its halves (:func:`_both_limits`)."""
    both = _both_limits(f)
    if both is not None:
        return both
    fu = f.follow_up
    if fu is None:
        return None
    found = [x for x in site_findings(f) if may_answer(fu.strategy, x)]
    if not found:
        return None
    loops = tuple(fu.site.get("loops") or ())
    m_path = tuple(f.at_site.main.path)
    # the move was already possible on this statement's nest: the step is not needed for it
    before_same = [a for a in f.alternatives if a.strategy == fu.strategy
                   and m_path[:len(a.site.get("path") or ())] == tuple(a.site.get("path") or ())]
    new = [v for v in loops if v not in f.before.loop_vars]
    if before_same or fu.strategy == f.strategy:
        return None
    if not [a for a in f.alternatives if a.strategy == fu.strategy]:
        why, ext = "no_site", None
    elif new and f.after is not None:
        lp = f.after.loop(new[0])
        why, ext = "new_loop", (lp.extent if lp is not None else None)
    else:
        return None
    return Preparation(fu.strategy, loops, why, ext, found[0])


__all__ = ["ANSWERS", "ORDER", "KEEPS_LINES", "SHARE_ONE_LOOP", "SHARES_SUBEXPRESSIONS", "Finding", "Preparation", "answers", "site_findings",
           "answered", "ends_strided_walk", "keeps_lines", "may_answer", "preparation", "split_halves"]
