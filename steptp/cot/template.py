"""The template writer: offline, deterministic reasoning built only from ``facts(step)``.

What it says could all be worked out from the prompt: the program before the step and the
fingerprinted hardware line (caches per core, SIMD width, cores). The argument is the one
:mod:`steptp.cot.argument` finds: the bottleneck is a limit at the step's own site that the step
answers (or that the move it prepares answers, named with the reason it needs this step); other
legal moves are set aside with reasons from the same findings, never ranked by a model's time;
the expected effect is a bound from prompt figures (cores, lanes, line elements, reuse
distance). Every claim is also written in structured form (``Cot.claims``) and checked by
:mod:`steptp.cot.claims`, and the argument by :mod:`steptp.cot.coherence`, so a template that
says something untrue or that does not follow is a failing test, not a dataset.

The wording varies by a choice seeded from the step's identity and the run seed (SHA-256, never
Python's salted ``hash``); the content varies because kernels and hardware do.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any, Optional

from .. import strategies as S
from ..format.cot_schema import (Bottleneck, Candidate, Check, Claim, Cot, Decision, ExpectedEffect,
                                 Observation)
from ..records import StepRecord
from .facts import Facts, SiteAccess, facts as compute_facts

WRITER_VERSION = "template-10"
MAX_ALTERNATIVES = 2


def fmt_bytes(b: int) -> str:
    """A size in the reasoning's own wording (also the release card's)."""
    if b >= 1 << 20 and b % (1 << 10) == 0:
        return f"{b / (1 << 20):.3g} MiB"
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return f"{b // (1 << 10)} KiB"
    return f"{b} bytes"


def _per_core(level: str) -> str:
    return " per core" if level in ("L1", "L2") else ""


#: what one update of a reduction does, by its operator (a `max=` chain is not one of adds)
_UPDATES = {"+=": "adds", "*=": "multiplies", "max=": "max operations", "min=": "min operations"}


def _updates(op: str) -> str:
    return _UPDATES.get(op, "updates")


def _held(hw, nbytes: int) -> str:
    """Where ``nbytes`` of data are held, in the reasoning's words: "L1", "L2", "L3" (when a
    plausible figure), else "beyond L2"."""
    lvl = hw.level(nbytes)
    return lvl if lvl != "DRAM" else f"beyond {hw.beyond()}"


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(str(d) for d in shape) if shape else "a scalar"


def _costly_list(costly) -> str:
    """``2 `log` calls and 1 division`` from (name, count) pairs (or a dict)."""
    items = sorted(dict(costly).items())
    parts = [(f"{c} division{'s' if c != 1 else ''}" if n == "division" else
              f"{c} `{n}` call{'s' if c != 1 else ''}") for n, c in items if c]
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def _ticks(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def target_kind(target: str) -> str:
    t = (target or "").lower()
    return "gpu" if any(w in t for w in ("cuda", "gpu", "nvptx", "rocm")) else "cpu"


#: steps that answer a diagnosis besides its remedy (a tiling that brings a unit-stride loop
#: innermost fixes a strided walk as a reorder does): no "the remedy was passed over" for them
_ANSWERS = {"locality": {"loop_reorder", "loop_tiling", "layout_transformation", "set_storage_layout",
                         "cache_read_write"}}


class _Pick:
    """Seeded choices: one ``random.Random`` per (seed, step identity)."""

    def __init__(self, seed: int, key: str):
        h = hashlib.sha256(f"{WRITER_VERSION}|{seed}|{key}".encode()).digest()
        self.rng = random.Random(int.from_bytes(h[:8], "big"))

    def __call__(self, *options: str) -> str:
        return self.rng.choice(options)


def _stride_list(accs: list[SiteAccess], after: bool = False) -> str:
    parts = []
    for a in accs:
        text = a.text if (a.text_after or not after) else None
        st = a.stride_after if after else a.stride
        if text is None:
            continue
        role = " (written)" if a.write else ""
        if st is None:
            parts.append(f"`{text}`{role} {'then ' if after else ''}with no constant stride")
        else:
            parts.append(f"`{text}`{role} {'then ' if after else ''}stride {abs(st)}")
    return "; ".join(parts)


def _stride_claims(accs: list[SiteAccess], after: bool = False,
                   path: Optional[list[int]] = None) -> list[Claim]:
    out = []
    for a in accs:
        text = a.text if (a.text_after or not after) else None
        st = a.stride_after if after else a.stride
        if text is not None:
            out.append(Claim(kind="stride", side="after" if after else "before", access=text,
                             value=st, path=path))
    return out


def _new_innermost(claims: list[Claim], loop: str, accs: list[SiteAccess],
                   unit: list[str]) -> str:
    """The claims of a step that makes ``loop`` innermost (``unit``: the accesses it walks with
    unit stride, as claimed) and the strides along it, as the reasoning lists them."""
    claims.append(Claim(kind="reorder_innermost", loop=loop, accesses=unit))
    claims.extend(_stride_claims(accs, after=True))
    return _stride_list(accs, after=True)


def _holds_tile_block(f: Facts, nbytes: int) -> bool:
    """Is a staged buffer of ``nbytes`` at the step's site a cache tile's block of accumulators:
    larger than the vector registers (``analysis.cost_model.REGISTERS``), at the loop right
    around a cache tile's reduction (``analysis.tiles.around_cache_tile``)? It lives in L1."""
    from ..analysis.cost_model import REGISTERS
    from ..analysis.tiles import around_cache_tile
    from ..leir import parse

    if f.hardware is None or nbytes <= REGISTERS * f.hardware.vector_bits // 8:
        return False
    try:
        return around_cache_tile(parse(f.before_text), tuple(f.site.get("path", ())))
    except Exception:  # noqa: BLE001 - a path the program does not hold: no cache tile
        return False


def _tile_row(f: Facts, lp) -> bool:
    """Is the step's loop the row loop of a staged register tile (``analysis.tiles.tile_row``)?"""
    from ..analysis.tiles import tile_row
    from ..leir import parse
    from ..leir.ast import node_at

    try:
        program = parse(f.before_text)
        return tile_row(program, node_at(program, tuple(lp.path)))
    except Exception:  # noqa: BLE001 - a path the program does not hold: no tile row
        return False


def _alt_answers(a, x) -> bool:
    """Would the legal move ``a`` answer the finding ``x``, as far as its site and parameters
    show: its strategy answers the kind, a tensor it names is the finding's, a subexpression
    shared is the one found repeated, and a reorder said to end a strided walk or a chain along
    the innermost loop does not keep that loop innermost."""
    from .argument import may_answer

    if not may_answer(a.strategy, x):
        return False
    if "repeated" in x.detail and (a.params or {}).get("expr") not in (None, x.detail["repeated"]):
        return False      # it shares another subexpression than the one found repeated
    t = (a.site or {}).get("tensor") or (a.params or {}).get("tensor")
    if t and x.tensor and t != x.tensor:
        return False
    loops = (a.site or {}).get("loops") or []
    if x.kind in ("parallelism", "vectorization") and x.loop is not None and loops \
            and x.loop not in loops:
        return False      # threads or lanes on another loop than the one found serial/scalar
    order = (a.params or {}).get("order")
    if a.strategy == "loop_reorder" and order and x.kind in ("locality", "dependence") \
            and x.loop is not None and order[-1] == x.loop:
        return False
    return True


class TemplateWriter:
    """``write(step) -> Cot``. Deterministic given (step, seed, hardware)."""

    name = "template"
    version = WRITER_VERSION

    def __init__(self, seed: int = 0, max_alternatives: int = MAX_ALTERNATIVES, hardware=None):
        self.seed = seed
        self.max_alternatives = max_alternatives
        self.hardware = hardware

    # ------------------------------------------------------------------ observation
    def _observation(self, f: Facts, pick: _Pick, claims: list[Claim]) -> Observation:
        p, hw, sf = f.before, f.hardware, f.at_site
        ins = [t for t in p.tensors.values() if t.role == "input"]
        outs = [t for t in p.tensors.values() if t.role == "output"]
        mids = [t for t in p.tensors.values() if t.role == "intermediate"]
        io = ", ".join(f"`{t.name}` ({_shape(t.shape)} {t.dtype})" for t in ins)
        od = ", ".join(f"`{t.name}` ({_shape(t.shape)})" for t in outs)
        s1 = pick(f"`{f.kernel}` reads {io} and writes {od}",
                  f"The kernel `{f.kernel}` maps {io} to {od}",
                  f"Inputs {io}; outputs {od}")
        if mids:
            s1 += pick(", through " + _ticks(t.name for t in mids),
                       ", staging values in " + _ticks(t.name for t in mids))
        s1 += pick(f", in {len(p.statements)} statement{'s' if len(p.statements) > 1 else ''}. ",
                   ". ")
        s1 += pick(f"{p.flops} operations over {p.bytes_moved} bytes of compulsory traffic "
                   f"(intensity {p.arithmetic_intensity:.2f} FLOP/B).",
                   f"Arithmetic intensity {p.arithmetic_intensity:.2f} FLOP/B: {p.flops} operations, "
                   f"{p.bytes_moved} bytes moved.")
        m = sf.main
        w: list[str] = []
        nest = ", ".join(f"`{v}` {e}" for v, e in m.nest)
        if m.loops:
            w.append(pick(f"At the site, `{m.text}` runs under its own nest {nest} "
                          f"({m.iterations} iterations).",
                          f"The site's statement `{m.text}` sits in the nest {nest}: "
                          f"{m.iterations} iterations.",
                          f"`{m.text}` ({m.iterations} iterations) is nested in {nest}."))
            claims.append(Claim(kind="loop_nest", loops=list(m.loops), extents=list(m.extents)))
            claims.append(Claim(kind="innermost_loop", loop=m.innermost))
            sl = _stride_list(list(sf.accesses))
            if sl:
                w.append(pick(f"Along the innermost loop `{m.innermost}`: {sl}.",
                              f"Per iteration of `{m.innermost}` (innermost) the accesses move: {sl}."))
                claims.extend(_stride_claims(list(sf.accesses)))
        # a read that comes back, else (the fill or copy-out of a staging buffer) a write: each
        # iteration of an outer loop rewriting the same elements is locality too
        reused = ([a for a in sf.accesses if a.reuse_loop is not None and not a.write]
                  or [a for a in sf.accesses if a.reuse_loop is not None])
        if m.loops and reused:
            a = max(reused, key=lambda x: (x.reuse_bytes or 0))
            if a.reuse_bytes and not a.write:
                w.append(pick(f"`{a.text}` is reused across iterations of `{a.reuse_loop}`, "
                              f"{fmt_bytes(a.reuse_bytes)} apart ({_held(hw, a.reuse_bytes)}).",
                              f"Reuse: `{a.text}` comes back every iteration of `{a.reuse_loop}`, after "
                              f"{fmt_bytes(a.reuse_bytes)} of other data ({_held(hw, a.reuse_bytes)})."))
            elif a.reuse_bytes:
                w.append(pick(f"The written `{a.text}` comes back: every iteration of "
                              f"`{a.reuse_loop}` rewrites the same elements, "
                              f"{fmt_bytes(a.reuse_bytes)} apart ({_held(hw, a.reuse_bytes)}).",
                              f"Only the write `{a.text}` is reused: each iteration of "
                              f"`{a.reuse_loop}` stores to the same elements again, after "
                              f"{fmt_bytes(a.reuse_bytes)} of other data ({_held(hw, a.reuse_bytes)})."))
            else:
                w.append(f"{'The written ' if a.write else ''}`{a.text}` does not move with the "
                         f"innermost loop `{a.reuse_loop}`: it stays in a register there.")
            claims.append(Claim(kind="reuse", access=a.text, loop=a.reuse_loop,
                                value=a.reuse_bytes or 0,
                                level=hw.level(a.reuse_bytes) if a.reuse_bytes else None))
            if a.write:
                claims.extend(Claim(kind="no_reuse", access=x.text) for x in sf.accesses
                              if x.reuse_loop is None)
        elif m.loops and sf.touched_once:
            w.append(pick("Every access depends on every loop of the nest: no element is touched "
                          "twice, there is no reuse to exploit.",
                          "Each element is touched once (no reuse): this nest is a pure stream."))
            claims.extend(Claim(kind="no_reuse", access=a.text) for a in sf.accesses)
            claims.append(Claim(kind="no_reuse"))
        elif m.loops and not sf.accessed_bytes:
            # a nest too large to count its elements exactly: whether accesses share elements
            # is unknown, only that none comes back to its own
            w.append(pick("No access comes back to its own elements: each moves with every loop "
                          "of its nest.",
                          "Every access depends on every loop of the nest, so none repeats its "
                          "own elements."))
            claims.extend(Claim(kind="no_reuse", access=a.text) for a in sf.accesses
                          if a.reuse_loop is None)
        elif m.loops:
            w.append(pick(f"No access comes back to its own elements, but different accesses share "
                          f"some: {fmt_bytes(sf.working_sets[0].bytes)} distinct for "
                          f"{fmt_bytes(sf.accessed_bytes)} of accesses.",
                          f"Accesses overlap one another ({fmt_bytes(sf.working_sets[0].bytes)} "
                          f"distinct of {fmt_bytes(sf.accessed_bytes)} accessed), though none "
                          f"repeats its own elements."))
            claims.extend(Claim(kind="no_reuse", access=a.text) for a in sf.accesses
                          if a.reuse_loop is None)
        if sf.working_sets:
            ws = sf.working_sets[0]
            lvl = ws.level
            where = (f"fits in {lvl} ({fmt_bytes(hw.size(lvl))}{_per_core(lvl)})" if lvl != "DRAM"
                     else f"exceeds {hw.beyond()} ({fmt_bytes(hw.beyond_bytes())}"
                          f"{_per_core(hw.beyond())})")
            w.append(pick(f"One run of `{ws.loop}` touches {fmt_bytes(ws.bytes)}, which {where} "
                          f"on this CPU.",
                          f"Working set of the whole nest: {fmt_bytes(ws.bytes)}; it {where}."))
            claims.append(Claim(kind="fits_in_cache", loop=ws.loop, value=ws.bytes, level=lvl))
        return Observation(computes=s1, work=" ".join(w))

    # ------------------------------------------------------------------ bottleneck
    def _bottleneck(self, f: Facts, pick: _Pick, claims: list[Claim]) -> Bottleneck:
        """The limit at the step's own site that the step answers (or that the move it prepares
        answers); with neither, the first limit found there (the example is then incoherent,
        :mod:`steptp.cot.coherence`, and stays out of the SFT set)."""
        from .argument import answered, preparation, site_findings

        x = answered(f)
        if x is None:
            prep = preparation(f)
            x = prep.finding if prep is not None else (site_findings(f) or [None])[0]
        if x is None:
            return Bottleneck(kind="compute", text="The program's arithmetic itself.")
        return Bottleneck(kind=x.kind, loop=x.loop, tensor=x.tensor,
                          text=self._finding_text(f, x, pick, claims))

    def _finding_text(self, f: Facts, x, pick: _Pick, claims: list[Claim]) -> str:
        hw, m = f.hardware, f.at_site.main
        path = list(m.path)
        det = x.detail
        if x.kind == "locality" and "stride" in det:
            line = (f" every iteration touches a new {hw.line_bytes}-byte line" if det["new_line"]
                    else f" {det['stride']} elements apart")
            a = next(a for a in f.at_site.accesses if a.text == det["access"])
            claims.append(Claim(kind="stride", access=a.text, value=a.stride, path=path))
            claims.append(Claim(kind="innermost_loop", loop=x.loop, path=path))
            back = ""
            if det.get("line_loop") and det["line_apart"] > hw.l1_bytes:
                # the line's other elements are not lost for good: they are read when the loop
                # outside comes round, if the line is still cached by then
                lp, gap = det["line_loop"], det["line_apart"]
                claims.append(Claim(kind="line_return", access=a.text, loop=lp, value=gap,
                                    level=hw.level(gap), path=path))
                back = pick(f" The next element of each such line is read only at the next "
                            f"iteration of `{lp}`, after {fmt_bytes(gap)} of lines, more than L1 "
                            f"holds ({fmt_bytes(hw.l1_bytes)}): by then the line has to come back "
                            f"from {_held(hw, gap)}.",
                            f" Its neighbour in the same line is needed one iteration of `{lp}` "
                            f"later, after {fmt_bytes(gap)} of lines pass through the cache, "
                            f"beyond L1 ({fmt_bytes(hw.l1_bytes)}): each line is fetched from "
                            f"{_held(hw, gap)} again for a single element.")
            return pick(f"`{a.text}` moves with stride {det['stride']} ({det['stride_bytes']} bytes) "
                        f"along the innermost loop `{x.loop}` of `{m.text}`:{line}.{back}",
                        f"Poor locality in `{m.text}`: the innermost loop `{x.loop}` walks "
                        f"`{a.text}` with stride {det['stride']};{line}.{back}")
        if x.kind == "locality":
            rb = det["reuse_bytes"]
            claims.append(Claim(kind="reuse", access=det["access"], loop=x.loop, value=rb,
                                level=hw.level(rb)))
            return pick(f"`{det['access']}` is read again in every iteration of `{x.loop}`, but "
                        f"{fmt_bytes(rb)} of other data pass in between, more than L1 holds "
                        f"({fmt_bytes(hw.l1_bytes)}): each reuse comes from {_held(hw, rb)}.",
                        f"Reuse too far apart: `{det['access']}` comes back every iteration of "
                        f"`{x.loop}` after {fmt_bytes(rb)} of other data, beyond the "
                        f"{fmt_bytes(hw.l1_bytes)} of L1, so it is fetched again from "
                        f"{_held(hw, rb)}.")
        if x.kind == "parallelism":
            claims.append(Claim(kind="parallel_safe", loop=x.loop, path=path))
            claims.append(Claim(kind="loop_extent", loop=x.loop, value=det["extent"], path=path))
            return pick(f"All the work of `{m.text}` runs on one core, but its outer loop `{x.loop}` "
                        f"has {det['extent']} iterations with no dependence between them, and this "
                        f"CPU gives {hw.cores} cores.",
                        f"Serial code on a {hw.cores}-core machine: the outer loop `{x.loop}` of "
                        f"`{m.text}` has {det['extent']} independent iterations.")
        if x.kind == "vectorization":
            claims.append(Claim(kind="innermost_loop", loop=x.loop, path=path))
            claims.append(Claim(kind="loop_extent", loop=x.loop, value=det["extent"], path=path))
            if det.get("strided"):
                g = _ticks(det["strided"])
                return pick(f"The innermost loop `{x.loop}` of `{m.text}` ({det['extent']} "
                            f"iterations) is scalar and carries no dependence; {hw.vector_bits}-bit "
                            f"registers hold {det['lanes']} lanes, though {g} would be gathered "
                            f"lane by lane.",
                            f"Scalar code: `{x.loop}` is innermost in `{m.text}`, {det['extent']} "
                            f"iterations with no dependence, {det['lanes']} lanes per register "
                            f"({g} strided along it).")
            return pick(f"The innermost loop `{x.loop}` of `{m.text}` ({det['extent']} iterations) "
                        f"is scalar, and every access moves by 0 or 1 element along it; "
                        f"{hw.vector_bits}-bit registers hold {det['lanes']} lanes.",
                        f"Scalar code: `{x.loop}` is innermost in `{m.text}`, contiguous and "
                        f"{det['extent']} long, while the CPU could do {det['lanes']} lanes per "
                        f"instruction.")
        if x.kind == "dependence" and det.get("scan"):
            claims.append(Claim(kind="innermost_loop", loop=x.loop, path=path))
            return pick(f"The innermost loop `{x.loop}` carries a dependence in `{m.text}`: each of "
                        f"its {det['extent']} iterations reads what an earlier one wrote, so they "
                        f"cannot overlap or run as vector lanes.",
                        f"A scan: along `{x.loop}` ({det['extent']} iterations) `{m.text}` reads the "
                        f"value the previous iteration produced.")
        if x.kind == "dependence":
            claims.append(Claim(kind="reduction_writes", tensor=x.tensor, axes=list(m.reduction_axes)))
            claims.append(Claim(kind="innermost_loop", loop=x.loop, path=path))
            return pick(f"The innermost loop `{x.loop}` is the reduction axis of `{m.text}`: its "
                        f"{det['extent']} iterations accumulate into one element of `{x.tensor}`, "
                        f"a serial chain of dependent {_updates(m.op)}.",
                        f"`{m.text}` accumulates into `{x.tensor}` along the innermost loop "
                        f"`{x.loop}` ({det['extent']} iterations): each update waits for the "
                        f"previous one.")
        if x.kind == "structure":
            b = det["bytes"]
            return pick(f"`{x.tensor}` ({fmt_bytes(b)}) is written whole by one nest and read back "
                        f"by another: between producing an element and using it, the whole "
                        f"intermediate passes, so the element is read back from {_held(hw, b)}.",
                        f"Producer and consumer are separate nests: all {fmt_bytes(b)} of "
                        f"`{x.tensor}` are written before the first is read again, from "
                        f"{_held(hw, b)}.")
        if x.kind == "memory":
            b = det["bytes"]
            claims.append(Claim(kind="fits_in_cache", loop=x.loop, value=b, level=hw.level(b)))
            return pick(f"One run of the nest of `{m.text}` touches {fmt_bytes(b)}, more than L2 "
                        f"holds ({fmt_bytes(hw.l2_bytes)} per core): its data come from "
                        f"{_held(hw, b)}.",
                        f"Memory-bound: `{m.text}` touches {fmt_bytes(b)} against an L2 of "
                        f"{fmt_bytes(hw.l2_bytes)} per core.")
        if x.kind == "loop_overhead":
            claims.append(Claim(kind="loop_extent", loop=x.loop, value=det["extent"], short=True,
                                path=path))
            return pick(f"The innermost loop `{x.loop}` of `{m.text}` is short ({det['extent']} "
                        f"iterations): its increment and branch are a visible share of each "
                        f"iteration.",
                        f"Loop control: `{x.loop}` runs only {det['extent']} iterations per entry "
                        f"in `{m.text}`.")
        if x.kind == "compute" and "repeated" in det:
            n, ops = det["times"], det["ops"]
            what = "1 operation" if ops == 1 else f"{ops} operations"
            return pick(f"`{det['repeated']}` occurs {n} times in `{m.text}`: every iteration "
                        f"evaluates it {n} times ({what} each) from the same operands, for the "
                        f"same value.",
                        f"Repeated work: `{m.text}` computes `{det['repeated']}` {n} times per "
                        f"iteration ({what} each), though every occurrence has the same value.")
        if x.kind == "compute" and "work" in det:
            per = _costly_list(det["work"])
            n = f.at_site.main.iterations
            return pick(f"Costly arithmetic: every iteration of `{m.text}` evaluates {per} "
                        f"({det['ops']} operations in all), each far slower than an add or a "
                        f"multiply; {n} iterations run them.",
                        f"`{m.text}` spends its time in {per} per iteration, each of which "
                        f"costs many adds or multiplies, over {n} iterations.")
        return pick(f"Nothing at this site is strided, serial where it could be parallel, or out of "
                    f"cache; at {f.before.arithmetic_intensity:.2f} FLOP/B the arithmetic itself "
                    f"dominates.",
                    f"Compute-bound: the data fit in cache and the intensity is "
                    f"{f.before.arithmetic_intensity:.2f} FLOP/B.")

    # ------------------------------------------------------------------ the chosen action
    def _chosen_reason(self, f: Facts, pick: _Pick, claims: list[Claim]) -> str:
        sf, hw = f.at_site, f.hardware
        s, prm = f.strategy, f.params
        loops = f.site.get("loops") or []
        v = loops[0] if loops else sf.loop
        m = sf.main
        lp = None
        if v:   # the loop of that name in the site's own nest (names repeat across nests)
            own = [x for x in f.before.loops if x.var == v and m.path[:len(x.path)] == x.path]
            lp = own[0] if own else f.before.loop(v)
        if s == "loop_reorder":
            new = sf.innermost_after
            if new is not None and new != m.innermost:
                unit = [a.text for a in sf.accesses
                        if a.stride_after is not None and abs(a.stride_after) <= 1 and a.text_after]
                strides = _new_innermost(claims, new, list(sf.accesses), unit)
                return pick(f"the order makes `{new}` innermost; along it: {strides}.",
                            f"`{new}` becomes the innermost loop, so the strides change to "
                            f"{strides}.")
            if any(a.reuse_loop is not None for a in sf.accesses):
                return pick(f"the innermost loop stays `{m.innermost}`; only the outer order changes, "
                            f"which moves where reuse happens.",
                            f"reorders the outer loops and keeps `{m.innermost}` innermost.")
            return pick(f"the innermost loop stays `{m.innermost}`; with no reuse in this nest, "
                        f"only the order in which lines are visited changes.",
                        f"reorders the outer loops and keeps `{m.innermost}` innermost.")
        if s == "loop_parallelization" and lp is not None:
            claims.append(Claim(kind="parallel_safe", loop=v))
            claims.append(Claim(kind="loop_extent", loop=v, value=lp.extent))
            return pick(f"`{v}` carries no dependence; its {lp.extent} iterations are spread over "
                        f"{hw.cores} cores.",
                        f"independent iterations of `{v}` ({lp.extent}) for {hw.cores} cores.")
        if s == "loop_vectorization" and lp is not None:
            lanes = hw.lanes(f.before.tensors[m.tensor].dtype) if m.tensor in f.before.tensors else 1
            claims.append(Claim(kind="loop_extent", loop=v, value=lp.extent))
            strided = [a for a in sf.accesses if m.innermost == v and a.stride is not None
                       and abs(a.stride) > 1]
            if strided:
                a = strided[0]
                claims.append(Claim(kind="stride", access=a.text, value=a.stride))
                return pick(f"SIMD over `{v}` ({lp.extent} iterations), although `{a.text}` moves with "
                            f"stride {abs(a.stride)} along it: those lanes become a "
                            f"{'scatter' if a.write else 'gather'}.",
                            f"vector code for `{v}`; `{a.text}` (stride {abs(a.stride)}) needs a "
                            f"{'scatter' if a.write else 'gather'} per vector.")
            if lp.extent < lanes:
                return pick(f"`{v}` has {lp.extent} iterations: one vector of {lp.extent} of the "
                            f"{lanes} lanes a {hw.vector_bits}-bit register holds.",
                            f"SIMD over `{v}`, but only {lp.extent} of {lanes} lanes are filled.")
            return pick(f"`{v}` has {lp.extent} iterations; {hw.vector_bits}-bit registers hold "
                        f"{lanes} lanes of them.",
                        f"SIMD over `{v}` ({lp.extent} iterations, {lanes} lanes per register).")
        if s == "loop_unrolling" and lp is not None and prm.get("inner"):
            inner = [x for x in f.before.loops
                     if len(x.path) > len(lp.path) and x.path[:len(lp.path)] == lp.path]
            claims.append(Claim(kind="loop_extent", loop=v, value=lp.extent))
            for x in inner:
                claims.append(Claim(kind="loop_extent", loop=x.var, value=x.extent))
            names = ", ".join(f"`{x.var}` ({x.extent})" for x in inner)
            return pick(f"`{v}` ({lp.extent}) and the loops inside it, {names}, are a small "
                        f"window; unrolled whole it becomes straight-line code with no loop "
                        f"control left in it.",
                        f"the window `{v}` ({lp.extent}) with {names} inside it is written out "
                        f"as straight-line code.")
        if s == "loop_unrolling" and lp is not None and _tile_row(f, lp):
            inner = next(x for x in f.before.loops if x.path[:-1] == lp.path)
            claims.append(Claim(kind="loop_extent", loop=v, value=lp.extent))
            claims.append(Claim(kind="loop_extent", loop=inner.var, value=inner.extent))
            return pick(f"`{v}` ({lp.extent}) runs the rows of a register tile around the vector "
                        f"loop `{inner.var}` ({inner.extent}); written out, each row's accumulators "
                        f"stay in their own vector registers across the updates, and a load the "
                        f"rows share is made once instead of once per row.",
                        f"the {lp.extent} rows `{v}` of the register tile over `{inner.var}` become "
                        f"straight-line code: one set of vector registers per row, shared loads "
                        f"made once.")
        if s == "loop_unrolling" and lp is not None:
            from .claims import SHORT_LOOP
            short = lp.extent <= SHORT_LOOP
            claims.append(Claim(kind="loop_extent", loop=v, value=lp.extent, short=short or None))
            if short:
                return pick(f"`{v}` runs only {lp.extent} iterations; unrolling removes its branch.",
                            f"a short loop `{v}` ({lp.extent}) becomes straight-line code.")
            return pick(f"`{v}` runs {lp.extent} iterations; unrolling by {prm.get('factor', 'its factor')} "
                        f"cuts its loop control by that factor.",
                        f"fewer branches per element of `{v}` ({lp.extent} iterations).")
        if s in ("loop_split",) and lp is not None:
            claims.append(Claim(kind="loop_extent", loop=v, value=lp.extent))
            return pick(f"splits `{v}` ({lp.extent} iterations) to expose an inner loop of "
                        f"{prm.get('factor')} iterations.",
                        f"an inner loop of {prm.get('factor')} iterations inside `{v}` ({lp.extent}).")
        if s == "loop_tiling" and prm.get("above") and len(prm.get("loops") or []) == 2:
            # a cache tile over a register tile (``search.space._cache_tilings``): what it buys
            # is the second-nearest reuse, a block of the shared operand kept in L1 for several
            # row tiles, which the nearest-reuse facts do not show
            (sv, rv), (fs_, fr_) = prm["loops"], prm["factors"]

            def index_vars(a: SiteAccess) -> set[str]:
                return set(re.findall(r"[A-Za-z_]\w*", a.text.split("[", 1)[-1]))

            shared = [a for a in sf.accesses if not a.write
                      and sv not in index_vars(a) and rv in index_vars(a)]
            for lv in (sv, rv):
                lps = [x for x in f.before.loops if x.var == lv]
                if lps:
                    claims.append(Claim(kind="loop_extent", loop=lv, value=lps[0].extent))
            what = f"`{shared[0].text}`" if shared else "the operand the rows share"
            return pick(f"`{sv}` and `{rv}` are tiled by {fs_} and {fr_} above the register tile's "
                        f"rows `{prm['above']}`: each block of {fr_} iterations of `{rv}` is then "
                        f"used by {fs_} row tiles in turn, so the part of {what} it reads is "
                        f"brought into L1 once for {fs_} row tiles instead of once for each.",
                        f"a cache tile over the register tile: blocks of {fr_} of `{rv}`, each "
                        f"shared by {fs_} consecutive row tiles of `{sv}`, so {what} is read from "
                        f"L2 once per {fs_} row tiles.")
        if s == "loop_tiling":
            fs = " and ".join(str(x) for x in prm.get("factors", []))
            new = sf.innermost_after
            unit_now = [a for a in sf.accesses if not a.write and a.stride is not None
                        and abs(a.stride) > 1 and a.stride_after is not None
                        and abs(a.stride_after) <= 1 and a.text_after]

            def new_innermost() -> str:
                # a register tile's point loops go inside the reduction: what pays may be the
                # new innermost loop's unit strides, not any reuse brought closer (a row sum
                # read down its columns, 2.9x, had been told "nothing is kept for later")
                strides = _new_innermost(claims, new, list(sf.accesses),
                                         [a.text for a in unit_now])
                return pick(f"tiles of {fs} put the point loops inside, so `{new}` becomes "
                            f"innermost; along it: {strides}.",
                            f"tiling by {fs} makes `{new}` the innermost loop, and the strides "
                            f"become {strides}.")
            moves_inner = new is not None and new != m.innermost and bool(unit_now)
            kept = self._kept_lines(f)
            if kept is not None:
                claims.append(Claim(kind="line_return", side="after", access=kept.text,
                                    loop=kept.line_loop_after, value=kept.line_apart_after,
                                    level=hw.level(kept.line_apart_after)))
                return pick(f"tiles of {fs} leave `{kept.text}` strided, but the next element of "
                            f"each line it fetches is read at the next iteration of "
                            f"`{kept.line_loop_after}`, after {fmt_bytes(kept.line_apart_after)} of "
                            f"lines, which L1 holds.",
                            f"tiling by {fs}: within a tile, the lines of `{kept.text}` fetched by "
                            f"`{new}` are read again by the next iteration of "
                            f"`{kept.line_loop_after}` only {fmt_bytes(kept.line_apart_after)} "
                            f"later, still in L1.")
            reused = [a for a in sf.accesses if a.reuse_loop is not None and a.reuse_bytes and not a.write]
            if reused:
                a = max(reused, key=lambda x: x.reuse_bytes)
                claims.append(Claim(kind="reuse", access=a.text, loop=a.reuse_loop, value=a.reuse_bytes,
                                    level=hw.level(a.reuse_bytes)))
                after = a.reuse_bytes_after
                if after is not None and after < a.reuse_bytes:
                    claims.append(Claim(kind="reuse", side="after", access=a.text, value=after))
                    return pick(f"tiles of {fs} shorten the distance between two uses of `{a.text}` "
                                f"from {fmt_bytes(a.reuse_bytes)} to {fmt_bytes(after)}.",
                                f"tiling by {fs} brings the reuse of `{a.text}` (across "
                                f"`{a.reuse_loop}`, {fmt_bytes(a.reuse_bytes)} apart) to "
                                f"{fmt_bytes(after)}.")
                if moves_inner:
                    return new_innermost()
                return pick(f"tiles of {fs}; the reuse of `{a.text}` across `{a.reuse_loop}` "
                            f"({fmt_bytes(a.reuse_bytes)} apart) does not get closer, only the "
                            f"traversal order changes.",
                            f"tiling by {fs} leaves the {fmt_bytes(a.reuse_bytes)} between uses of "
                            f"`{a.text}` as it is.")
            if moves_inner:
                return new_innermost()
            claims.extend(Claim(kind="no_reuse", access=a.text) for a in sf.accesses
                          if a.reuse_loop is None)
            if any(a.reuse_loop is not None for a in sf.accesses):
                # only an accumulator the nest writes stays put: no read comes back
                return pick(f"tiles of {fs} only change the traversal order: no read of this nest "
                            f"is reused, so nothing is kept for later.",
                            f"tiling by {fs}; with no read reused in this nest it changes the order "
                            f"in which lines are touched, nothing more.")
            return pick(f"tiles of {fs} only change the traversal order: there is no reuse in this "
                        f"nest, so nothing is kept for later.",
                        f"tiling by {fs}; with no reuse in this nest it changes the order in which "
                        f"lines are touched, nothing more.")
        if s in ("compute_at", "reverse_compute_at", "loop_fusion"):
            st = f.staging
            if st is not None and st[2] > 1:
                t, loop, ext, b = st
                claims.append(Claim(kind="staged_in_cache", side="after", tensor=t, loop=loop,
                                    value=b, level=hw.level(b)))
                return pick(f"each of the {ext} iterations of `{loop}` then produces and consumes "
                            f"{fmt_bytes(b)} of `{t}` ({_held(hw, b)}).",
                            f"`{t}` is consumed in the same iteration of `{loop}` that produces it: "
                            f"{fmt_bytes(b)} at a time, held in {_held(hw, b)}.")
            t = f.site.get("tensor")
            if t:
                return pick(f"computes `{t}` inside the nest that reads it, next to its use, instead "
                            f"of in a nest of its own.",
                            f"moves the producer of `{t}` into its consumer's nest.")
            return pick("brings producer and consumer into one nest.",
                        "one nest holds both the producer and its consumer.")
        if s == "reduction_factorization" and m.is_reduction:
            claims.append(Claim(kind="reduction_writes", tensor=m.tensor, axes=list(m.reduction_axes)))
            return pick(f"partial results over `{v}` split the single chain into `{m.tensor}` into "
                        f"{prm.get('factor', 'several')} independent ones.",
                        f"rfactor: independent partial results instead of one serial chain into "
                        f"`{m.tensor}`.")
        t = f.site.get("tensor") or prm.get("tensor")
        at = _ticks(loops) or "the site"
        if s == "cache_read_write" and t:
            mode = f.site.get("mode", "write")
            scope = prm.get("scope", "local")
            if mode == "write":
                # why a local stage pays (leir.private): the buffer is the iteration's own, so
                # LLVM keeps it in registers, also inside a parallel loop, where it may not keep
                # a global buffer's accumulators there
                why = (" The buffer is each iteration's own, so a small one can live in "
                       "registers, also once a loop around it runs in parallel."
                       if scope == "local" else "")
                new = [x for x in (f.after.tensors.values() if f.after else ())
                       if x.name not in f.before.tensors]
                hw = f.hardware
                if scope == "local" and len(new) == 1 and _holds_tile_block(f, new[0].bytes):
                    # a cache tile's block of accumulators (``search.space.stages_tile_accumulators``)
                    b = new[0].bytes
                    why = (f" The {fmt_bytes(b)} buffer holds the accumulators of every row "
                           f"tile inside {at}, more than the vector registers hold but within "
                           f"{_held(hw, b)}: each block of the reduction updates it there, and "
                           f"`{t}` is written once per iteration, not once per block.")
                return pick(f"each iteration of {at} accumulates `{t}` in a {scope} staging buffer and "
                            f"writes it back once, instead of updating `{t}` in place.{why}",
                            f"redirects the updates of `{t}` inside {at} to a {scope} buffer, copied "
                            f"back at the end of each iteration.{why}")
            return pick(f"copies the part of `{t}` each iteration of {at} reads into a {scope} buffer "
                        f"first.", f"stages the reads of `{t}` inside {at} in a {scope} buffer.")
        if s == "expression_reorder" and prm.get("expr"):
            how = {"swap": "swaps its operands", "rotate_left": "regroups it to the left",
                   "rotate_right": "regroups it to the right"}.get(prm.get("rewrite"), "reorders it")
            return pick(f"rewrites `{prm['expr']}`: {how}; the loop structure is unchanged.",
                        f"`{prm['expr']}` {how}, which changes only the order of the arithmetic.")
        if s in ("layout_transformation",) and t:
            return pick(f"stores `{t}` with its dimensions permuted, so the accesses walk it in a "
                        f"different order.", f"permutes the layout of `{t}`.")
        if s == "set_storage_layout" and t:
            return pick(f"pads the innermost dimension of `{t}` without changing any access.",
                        f"changes only the storage of `{t}` (padding).")
        if s == "online_softmax":
            return pick("merges the max pass and the sum pass into one online pass with a running "
                        "max and a rescaled sum: one read of the row fewer.",
                        "one pass computes the running max and the rescaled sum together.")
        if s == "tensor_split_to_decouple_operators" and prm.get("loop") and f.after is not None:
            v = prm["loop"]
            lp, half = f.before.loop(v), f.after.loop(v)
            if lp is not None and half is not None:
                return pick(f"splits the nest into two nests, each over one half of `{v}` "
                            f"({half.extent} of its {lp.extent} iterations).",
                            f"two nests instead of one, the first over `{v}` < {half.extent}, the "
                            f"second over the rest.")
        if s == "common_subexpression_elimination":
            return pick("computes the repeated subexpression once per iteration into a scalar.",
                        "a repeated subexpression is evaluated once and reused.")
        if s == "compute_inline" and t:
            return pick(f"substitutes the producer of `{t}` into its reads and removes `{t}`.",
                        f"inlines `{t}`: recomputed at each read instead of stored.")
        if s == "operator_fusion":
            sp = tuple((f.site or {}).get("path") or ())
            par = [x for x in f.before.loops if x.kind == "parallel" and x.path[:len(sp)] == sp]
            if sp and par:
                return pick(f"merges the producer nest and its consumer under their parallel loop "
                            f"`{par[0].var}`: one parallel region (one fork and join of the "
                            f"threads) instead of two.",
                            f"one parallel region over `{par[0].var}` instead of two.")
            return pick("merges the producer nest and its consumer into one nest.",
                        "one nest instead of two over the common iteration space.")
        sf = f.at_site
        if f.family == "algebraic" and sf is not None and sf.main_after is not None \
                and sf.main_after.text != sf.main.text and sf.main_after.nest == sf.main.nest:
            # an algebraic rewrite of one statement is best said by the statement it gives
            return pick(f"rewrites `{sf.main.text}` as `{sf.main_after.text}`; the loops stay "
                        f"as they are.",
                        f"the statement becomes `{sf.main_after.text}`, the same value with "
                        f"other arithmetic.")
        desc = self._description(f, s)
        if desc:
            return pick(f"{desc}.", f"`{s}`: {desc}.")
        return pick(f"applies `{s}` at this site.", f"`{s}` here.")

    @staticmethod
    def _description(f: Facts, s: str) -> str:
        """The registry's own description of the strategy, when it names nothing the program lacks."""
        from .validate import cited_numbers, named_identifiers
        try:
            d = S.get(s).description.strip().rstrip(".")
        except Exception:  # noqa: BLE001
            return ""
        d = d.replace("`", "")
        d = re.split(r"[:;(]", d, maxsplit=1)[0].strip().rstrip(".,")   # its first clause
        if not d or len(d.split()) < 3 or len(d) > 160 or any(c in d for c in "[]=") or named_identifiers(d) \
                or cited_numbers(d):
            return ""
        return d[0].lower() + d[1:]

    # ------------------------------------------------------------------ alternatives
    def _alternatives(self, f: Facts, pick: _Pick, claims: list[Claim]) -> list[Candidate]:
        """Other legal moves, each with a reason from the findings at the site, never a ranking:
        a move that answers another limit found here is left for a later step (this step takes
        the limit the bottleneck names); a move that answers nothing found here is not called
        for. No cost-model time is cited: a model cannot derive one from the prompt."""
        from .argument import answered, answers, preparation, site_findings

        found = site_findings(f)
        mine = answered(f)
        prep = preparation(f) if mine is None else None
        taken = mine or (prep.finding if prep is not None else None)
        firsts: dict[str, Any] = {}
        for a in f.alternatives:
            if a.strategy != f.strategy and (prep is None or a.strategy != prep.strategy):
                firsts.setdefault(a.strategy, a)
        later, idle = [], []
        m_path = tuple(f.at_site.main.path)
        for name in sorted(firsts):
            a = firsts[name]
            a_path = tuple(a.site.get("path") or ())
            if m_path[:len(a_path)] != a_path:
                idle.append((a, "elsewhere"))     # another nest: not about this statement
                continue
            other = [x for x in found if _alt_answers(a, x) and x != taken]
            if other:
                later.append((a, other[0]))
            elif not any(answers(name, x.kind) for x in found):
                idle.append((a, "idle"))
        picks: list[tuple[Any, Any]] = []
        n_alt = self.max_alternatives - (1 if f.refusals else 0)
        if later:
            picks.append(pick.rng.choice(later))
        while idle and len(picks) < max(1, n_alt):
            a = pick.rng.choice(idle)
            idle.remove(a)
            picks.append(a)
        picks = picks[:max(1, n_alt)]
        out: list[Candidate] = []
        for a, other in picks:
            where = _ticks(a.site.get("loops") or []) or "its site"
            if other == "elsewhere":
                reason = pick(f"at {where}: it changes another nest, not the statement this step "
                              f"acts on.",
                              f"at {where}, in a different nest from the one diagnosed here.")
            elif other is not None and other != "idle":
                kind = other.kind.replace("_", " ")
                on = f" of `{other.loop}`" if other.loop else (f" of `{other.tensor}`" if other.tensor else "")
                reason = pick(f"at {where}: it answers the {kind} limit{on}, a different one from the "
                              f"limit this step takes on; it stays open for a later step.",
                              f"at {where}, for the {kind}{on}, not for the limit named above; "
                              f"left for a later step.")
            else:
                reason = pick(f"at {where}: none of the limits found at this site calls for it.",
                              f"at {where}; nothing found here is what it fixes.")
            out.append(Candidate(strategy=a.strategy, site=a.site, params=dict(a.params) or None,
                                 verdict="rejected", reason=reason))
        if f.refusals:
            remedy = next((s for s in S.names() if taken is not None and answers(s, taken.kind)
                           and any(r.strategy == s for r in f.refusals)), "")
            r = self._teaching_refusal(f, remedy, pick)
            out.append(Candidate(strategy=r.strategy, site=r.site, params=dict(r.params) or None,
                                 verdict="rejected", refused=True,
                                 reason=self._refusal(f, r.reason, pick)))
        if not {c.strategy for c in out}:
            others = [n for n in S.names() if n != f.strategy]
            out.append(Candidate(strategy=others[0], verdict="rejected",
                                 reason="the registry finds no legal application of it here."))
        return out

    @staticmethod
    def _teaching_refusal(f: Facts, remedy: str, pick: _Pick):
        """The refusal to show: the diagnosis's remedy's when it has one (e.g. why a serial
        nest's reduction axis cannot be parallelized), else a seeded choice among the teaching
        refusals, one per strategy. The first in registry order was the same ``loop_collapse``
        of a reduction axis with a spatial loop in nearly every released example; preferring
        any one strategy only moves the monotony (``loop_parallelization`` of the reduction
        axis, next)."""
        for r in f.refusals:
            if r.strategy == remedy:
                return r
        firsts: dict[str, Any] = {}
        for r in f.refusals:
            firsts.setdefault(r.strategy, r)
        return pick.rng.choice(list(firsts.values()))

    @staticmethod
    def _refusal(f: Facts, reason: str, pick: _Pick) -> str:
        from .validate import SMALL_COUNTS, cited_numbers, named_identifiers, number_matches
        allowed = set(f.names_before) | set(S.names())
        ok = all(n in allowed for n in named_identifiers(reason))
        for num, unit, _ in cited_numbers(reason, [f.before_text]):
            if not (not unit and float(num.replace(",", "")) in SMALL_COUNTS) and \
                    not number_matches(num, unit, f.numbers.values()):
                ok = False
        reason = reason.replace("`", "")
        if ok and reason:
            return pick("illegal here: ", "refused: ") + reason.rstrip(".") + "."
        return pick("the legality check refuses it: a dependence forbids it here.",
                    "refused: a dependence of this nest forbids it.")

    # ------------------------------------------------------------------ effect, check
    @staticmethod
    def _kept_lines(f: Facts) -> Optional[SiteAccess]:
        """The strided access whose lines the step keeps in L1 until their next element is
        read (:func:`steptp.cot.argument.keeps_lines`), when that is the limit it answers."""
        from .argument import answered, keeps_lines

        x = answered(f)
        if x is None or x.kind != "locality" or not keeps_lines(f, x):
            return None
        return next((a for a in f.at_site.accesses if a.text == x.detail["access"]), None)

    def _effect(self, f: Facts, pick: _Pick, claims: list[Claim]) -> ExpectedEffect:
        """What the step can gain, by a rule over prompt quantities (an upper bound, not a
        model's time): cores, lanes, elements per cache line, reuse distance, bytes no longer
        written and read back. A preparatory step names the move it makes possible and why that
        move needs it."""
        from .argument import answered, keeps_lines, preparation

        hw = f.hardware
        x = answered(f)
        if x is None:
            prep = preparation(f)
            if prep is None:
                return ExpectedEffect(direction="neutral", text=pick(
                    "nothing found at this site is what this step changes; no gain follows from "
                    "the program's figures.",
                    "no limit found here is answered by it, so no gain can be argued."))
            where = _ticks(prep.loops) or "its site"
            kind = prep.finding.kind.replace("_", " ")
            if prep.why == "no_site":
                need = pick(f"`{prep.strategy}` has no legal site in the program before this step",
                            f"before this step the registry finds no legal `{prep.strategy}`")
            elif prep.why == "both_limits":
                return ExpectedEffect(direction="preparatory", enables=prep.strategy,
                                      text=self._both_limits_text(f, prep, pick))
            else:
                need = pick(f"`{prep.strategy}` acts on `{prep.loops[0]}` ({prep.extent} iterations), "
                            f"a loop this step creates",
                            f"the loop `{prep.loops[0]}` that `{prep.strategy}` needs ({prep.extent} "
                            f"iterations) exists only after this step")
            text = pick(f"no gain by itself; it prepares `{prep.strategy}` at {where}, which answers "
                        f"the {kind} limit above: {need}.",
                        f"it makes way for `{prep.strategy}` at {where}, the move for the {kind} "
                        f"limit named above: {need}.")
            return ExpectedEffect(direction="preparatory", enables=prep.strategy, text=text)
        det = x.detail
        new_bufs = [t for t in (f.after.tensors.values() if f.after is not None else ())
                    if t.name not in f.before.tensors]
        t_site = f.site.get("tensor")
        if f.strategy == "cache_read_write" and t_site and len(new_bufs) == 1:
            b = new_bufs[0].bytes
            at = _ticks(f.site.get("loops") or []) or "the site"
            if f.site.get("mode", "write") == "write":
                text = pick(f"the updates of `{t_site}` inside {at} go to a {fmt_bytes(b)} buffer "
                            f"held in {_held(hw, b)}, and `{t_site}` itself is written once per "
                            f"iteration of {at}.",
                            f"a {fmt_bytes(b)} local buffer ({_held(hw, b)}) takes the repeated "
                            f"updates; `{t_site}` in memory sees one write per iteration of {at}.")
            else:
                text = pick(f"the reads of `{t_site}` inside {at} come from a {fmt_bytes(b)} copy "
                            f"held in {_held(hw, b)}.",
                            f"a {fmt_bytes(b)} local copy ({_held(hw, b)}) serves the reads of "
                            f"`{t_site}` inside {at}.")
            return ExpectedEffect(direction="faster", text=text)
        if x.kind == "structure" and f.staging is not None and f.staging[0] == x.tensor \
                and f.staging[2] > 1:
            t, loop, ext, b = f.staging
            text = pick(f"`{t}` ({fmt_bytes(det['bytes'])} as a whole) is then produced and used "
                        f"{fmt_bytes(b)} at a time in each of the {ext} iterations of `{loop}`, "
                        f"from {_held(hw, b)}.",
                        f"each iteration of `{loop}` produces and consumes {fmt_bytes(b)} of "
                        f"`{t}` while it is in {_held(hw, b)}, instead of all "
                        f"{fmt_bytes(det['bytes'])} before the first use.")
            return ExpectedEffect(direction="faster", text=text)
        if x.kind == "parallelism":
            n = min(det["extent"], hw.cores)
            text = pick(f"the {det['extent']} iterations of `{x.loop}` shared by {hw.cores} "
                        f"cores, at most {n}x on this nest.",
                        f"bounded by {n}x on this nest ({det['extent']} iterations over "
                        f"{hw.cores} cores).")
        elif x.kind == "vectorization" and f.strategy == "loop_vectorization":
            n = min(det["extent"], det["lanes"])
            text = pick(f"up to {n} lanes per instruction instead of one on `{x.loop}`.",
                        f"at most {n}x on the arithmetic of `{x.loop}` ({det['lanes']} "
                        f"lanes per register).")
        elif x.kind == "locality" and "stride" in det:
            a = next(a for a in f.at_site.accesses if a.text == det["access"])
            isz = max(1, (a.stride_bytes or 1) // max(1, a.stride or 1)) if a.stride else 4
            per = hw.line_bytes // isz
            was = max(1, hw.line_bytes // max(1, det["stride_bytes"]))
            if a.stride_after == 0:
                text = pick(f"`{a.text}` then stays the same element along the innermost loop: one "
                            f"load kept in a register instead of a new element {det['stride']} "
                            f"elements away each iteration.",
                            f"`{a.text}` no longer moves along the innermost loop; it is loaded once "
                            f"per run of it.")
            elif a.stride_after is not None and abs(a.stride_after) <= 1 and a.text_after:
                text = pick(f"`{a.text}` then moves by one element, so each {hw.line_bytes}-byte line "
                            f"serves {per} consecutive iterations instead of {was}.",
                            f"unit stride for `{a.text}`: {per} elements of each {hw.line_bytes}-"
                            f"byte line used in turn, against {was} before.")
            elif keeps_lines(f, x):
                gap, gap2 = a.line_apart, a.line_apart_after
                text = pick(f"each {hw.line_bytes}-byte line of `{a.text}` then serves up to {per} "
                            f"elements while it is in L1 ({fmt_bytes(gap2)} of lines between two of "
                            f"them, against {fmt_bytes(gap)} before), not one element per fetch "
                            f"from {_held(hw, gap)}.",
                            f"the lines of `{a.text}` stay in L1 until their next element is read "
                            f"({fmt_bytes(gap2)} apart instead of {fmt_bytes(gap)}): up to {per} "
                            f"elements per line fetched instead of 1.")
            else:
                text = pick(f"`{a.text}` is walked in an order that uses more of each "
                            f"{hw.line_bytes}-byte line before it is evicted.",
                            f"fewer lines of `{a.text}` fetched per iteration.")
        elif x.kind == "locality":
            rb = det["reuse_bytes"]
            after = next((a.reuse_bytes_after for a in f.at_site.accesses
                          if a.text == det["access"]), None)
            if after is not None and after < rb:
                text = pick(f"uses of `{det['access']}` come {fmt_bytes(after)} apart instead "
                            f"of {fmt_bytes(rb)}, from {_held(hw, after)} rather than "
                            f"{_held(hw, rb)}.",
                            f"the reuse distance of `{det['access']}` drops from "
                            f"{fmt_bytes(rb)} to {fmt_bytes(after)} ({_held(hw, after)}).")
            else:
                text = pick(f"`{det['access']}` is reused while it is still in a nearer "
                            f"cache than {_held(hw, rb)}.",
                            f"fewer of the {fmt_bytes(rb)} between uses of "
                            f"`{det['access']}` in the way.")
        elif x.kind == "dependence" and f.strategy in ("loop_reorder", "loop_tiling"):
            new = f.at_site.innermost_after
            text = pick(f"the innermost loop then walks `{new}`, whose iterations update different "
                        f"elements of `{x.tensor}`: they no longer wait on each other, so they can "
                        f"overlap.",
                        f"no chain along the new innermost loop (`{new}`): its iterations are "
                        f"independent updates of `{x.tensor}`.")
        elif x.kind == "dependence" and f.strategy == "cache_read_write":
            text = pick(f"the chain of {det['extent']} updates of `{x.tensor}` then runs on a local "
                        f"buffer that can stay in registers, not on `{x.tensor}` in memory.",
                        f"each of the {det['extent']} dependent updates reads and writes a local "
                        f"buffer instead of `{x.tensor}` in memory.")
        elif x.kind == "dependence":
            k = f.params.get("factor")
            text = pick(f"the chain of {det['extent']} dependent updates of `{x.tensor}` is "
                        f"broken up" + (f" into {k} independent ones." if k else "."),
                        f"updates of `{x.tensor}` no longer wait on each other one by one.")
        elif x.kind == "structure":
            text = pick(f"the {fmt_bytes(det['bytes'])} of `{x.tensor}` are no longer all "
                        f"written before they are read back; each part is used while still near.",
                        f"`{x.tensor}` ({fmt_bytes(det['bytes'])}) is consumed close to "
                        f"where it is produced.")
        elif x.kind == "memory":
            text = pick(f"less of the {fmt_bytes(det['bytes'])} comes from "
                        f"{_held(hw, det['bytes'])} each time it is needed.",
                        f"more of the nest's {fmt_bytes(det['bytes'])} are used from a "
                        f"nearer cache.")
        elif x.kind == "compute" and "repeated" in det:
            saved = (det["times"] - 1) * det["ops"]
            text = pick(f"`{det['repeated']}` is evaluated once per iteration instead of "
                        f"{det['times']} times: {saved} operation{'s' if saved != 1 else ''} fewer "
                        f"in each iteration; the value waits in a local scalar.",
                        f"{saved} operation{'s' if saved != 1 else ''} saved per iteration: one "
                        f"evaluation of `{det['repeated']}` serves all {det['times']} uses.")
        elif x.kind == "compute" and "work" in det:
            w = f.at_site.work
            before, after = _costly_list(w.costly), _costly_list(w.costly_after or ())
            if w.n_costly_after < w.n_costly:
                text = pick(f"each iteration then evaluates {after or 'no costly operation'} "
                            f"instead of {before}: {w.n_costly - w.n_costly_after} costly "
                            f"operation{'s' if w.n_costly - w.n_costly_after != 1 else ''} fewer "
                            f"per iteration for the same result.",
                            f"{before} per iteration become {after or 'none'}, for the same "
                            f"value.")
            else:
                saved = w.ops - w.ops_after
                text = pick(f"{after} per iteration, as many costly operations as before "
                            f"({before}), and {w.ops_after} operations in all instead of "
                            f"{w.ops}.",
                            f"{saved} operation{'s' if saved != 1 else ''} fewer per iteration, "
                            f"with as many costly ones as before ({after}).")
        elif x.kind == "loop_overhead":
            text = pick(f"the increment and branch of `{x.loop}` ({det['extent']} "
                        f"iterations) disappear.",
                        f"no loop control left for `{x.loop}`.")
        else:
            text = pick("fewer operations per element for the same result.",
                        "less arithmetic per iteration.")
        return ExpectedEffect(direction="faster", text=text)

    @staticmethod
    def _both_limits_text(f: Facts, prep, pick: _Pick) -> str:
        """A split of the one loop both the cores and the lanes need (``argument._both_limits``):
        a loop cannot be parallel and vectorized at once; its halves can."""
        from .argument import site_findings, split_halves

        hw = f.hardware
        v = f.site["loops"][0]
        outer, inner = split_halves(f)
        lp = f.before.loop(v)
        lanes = next(x.detail["lanes"] for x in site_findings(f)
                     if x.kind == "vectorization" and x.loop == v)
        return pick(f"no gain by itself: `{v}` ({lp.extent} iterations) is the loop both the "
                    f"{hw.cores} cores and the {lanes} vector lanes need, and one loop cannot be "
                    f"parallel and vectorized at once; split, `{outer.var}` ({outer.extent}) can "
                    f"go to the cores and `{inner.var}` ({inner.extent}) to the lanes, so "
                    f"`{prep.strategy}` on `{prep.loops[0]}` needs this step first.",
                    f"it prepares `{prep.strategy}` on `{prep.loops[0]}`, a loop this step "
                    f"creates: `{v}` ({lp.extent}) cannot be both the parallel loop for "
                    f"{hw.cores} cores and the vector loop for {lanes} lanes; its halves "
                    f"`{outer.var}` ({outer.extent}) and `{inner.var}` ({inner.extent}) can.")

    def _check(self, f: Facts, pick: _Pick) -> Check:
        outs = list(f.outputs)
        o = _ticks(outs)
        if f.exactness == "exact":
            text = pick(f"every element of {o} is computed by the same operations in the same order, "
                        f"so the results must be bit-identical.",
                        f"the rewrite only changes iteration order or structure, not arithmetic: "
                        f"{o} must match exactly.")
        elif f.exactness == "reassociation":
            text = pick(f"floating-point sums are regrouped, so {o} must match up to rounding.",
                        f"the reduction order changes; {o} must agree within floating-point tolerance.")
        else:
            text = pick(f"an algebraic identity is used; {o} must agree within tolerance.",
                        f"{o} must stay mathematically equal (within tolerance).")
        return Check(exactness=f.exactness, outputs=outs, text=text)

    # ------------------------------------------------------------------ entry point
    def write(self, step: StepRecord, f: Optional[Facts] = None) -> Cot:
        f = f if f is not None else compute_facts(step, self.hardware)
        pick = _Pick(self.seed, f.seed_text)
        claims: list[Claim] = []
        obs = self._observation(f, pick, claims)
        bott = self._bottleneck(f, pick, claims)
        chosen = Candidate(strategy=step.strategy, site=dict(step.site), params=dict(step.params) or None,
                           verdict="chosen", reason=self._chosen_reason(f, pick, claims))
        alts = self._alternatives(f, pick, claims)
        cands = [chosen] + alts
        if pick("first", "shuffled") == "shuffled":
            cands = alts[:1] + [chosen] + alts[1:]
        effect = self._effect(f, pick, claims)
        uniq: list[Claim] = []
        for c in claims:
            if c not in uniq:
                uniq.append(c)
        return Cot(observation=obs, bottleneck=bott, candidates=cands,
                   decision=Decision(strategy=step.strategy, site=dict(step.site), params=dict(step.params)),
                   expected_effect=effect, check=self._check(f, pick), claims=uniq)


__all__ = ["TemplateWriter", "WRITER_VERSION", "fmt_bytes", "target_kind"]
