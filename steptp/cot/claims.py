"""The claim checker: every claim a reasoning makes about the program, the hardware or the cost
model, checked against ``facts(step)``.

Claims come from two places, and both are checked:

* the structured ``Cot.claims`` (kinds in :data:`steptp.format.cot_schema.ClaimKind`) — what the
  template writes and what the LLM is asked to fill;
* the prose of every text field, where :func:`prose_claims` recognises the common sentence
  shapes ("innermost loop `k`", "`B[j,i]` ... stride 32", "makes `j` innermost", "reduces into
  `G`", "fits in L1", "reuse", "`i` is short") so that an LLM cannot say in words what it did not
  claim in structure.

``check_claims(cot, f)`` returns one problem per wrong claim, each starting with
``claim <kind>:`` so that the audit can count errors by kind. Besides the claims themselves it
checks the parts of the reasoning that must come from before the measurement: the bottleneck is
one of the limits :func:`steptp.cot.argument.site_findings` finds at the step's site in the
before-program; predicted times, where a writer fills the structured fields, are the cost
model's (the text may not cite them: :mod:`steptp.cot.coherence`, ``derivable``).
"""

from __future__ import annotations

import re
from typing import Optional

from ..format.cot_schema import Claim, Cot
from .facts import Facts, StmtFact

SHORT_LOOP = 16     # a loop this short or shorter is "short" (its control is a visible share)
REL_TOL = 0.01      # predicted seconds must match the cost model within 1%


def _sf(f: Facts, c: Optional[Claim] = None):
    if c is None or c.path is None:
        return f.at_site
    for sf in (f.at_site, f.at_hot):
        if sf is not None and list(sf.main.path) == list(c.path):
            return sf
    return None


def _main(sf, side: str) -> Optional[StmtFact]:
    if sf is None:
        return None
    return sf.main if side == "before" else sf.main_after


def _pf(f: Facts, side: str):
    return f.before if side == "before" else f.after


def _close(a: float, b: float, rel: float = REL_TOL) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def _fmt_loops(s: StmtFact) -> str:
    return ", ".join(f"{v} {e}" for v, e in s.nest) or "none"


def check_claim(c: Claim, f: Facts) -> list[str]:
    """Problems with one structured claim (empty when it holds)."""
    k = c.kind
    sf = _sf(f, c)
    hw = f.hardware
    if sf is None:
        return [f"claim {k}: path {c.path} is neither the site's main statement nor the "
                f"diagnosed one"]
    main = _main(sf, c.side)
    pf = _pf(f, c.side)
    bad: list[str] = []
    where = f"the site's main statement `{main.text}`" if main is not None else "the site"

    def fail(msg: str) -> None:
        bad.append(f"claim {k}: {msg}")

    if k in ("loop_nest", "innermost_loop", "stride", "reuse", "no_reuse", "fits_in_cache",
             "reorder_innermost") and main is None:
        fail(f"there is no {c.side}-program statement matching the site")
        return bad
    if k == "loop_nest":
        if list(c.loops or []) != list(main.loops) or (c.extents is not None
                                                       and list(c.extents) != list(main.extents)):
            fail(f"the loops of {where} ({c.side} the step) are {_fmt_loops(main)}, not "
                 f"{', '.join(c.loops or [])} {list(c.extents or [])} (only the statement's own nest counts)")
    elif k == "innermost_loop":
        if c.loop != main.innermost:
            fail(f"the innermost loop of {where} ({c.side} the step) is `{main.innermost}`, not `{c.loop}`")
    elif k == "stride":
        accs = sf.accesses
        if c.side == "before":
            hit = [a for a in accs if a.text == c.access]
            val = hit[0].stride if hit else None
        else:   # after the step: named by its before-text or its after-text
            hit = [a for a in accs if a.text == c.access] or [a for a in accs if a.text_after == c.access]
            val = hit[0].stride_after if hit else None
        if not hit:
            fail(f"`{c.access}` is not an access of {where} ({c.side} the step); its accesses are "
                 + ", ".join(f"`{a.text if c.side == 'before' else a.text_after}`" for a in accs))
        elif (val is None) != (c.value is None) or (val is not None and int(c.value) != val):
            inner = main.innermost if c.side == "before" else sf.innermost_after
            fail(f"`{c.access}` moves {val} elements per iteration of the innermost loop "
                 f"`{inner}` ({c.side} the step), not {c.value}")
    elif k == "reduction_writes":
        reds = [s for s in pf.statements if s.is_reduction] if pf is not None else []
        ok = [s for s in reds if s.tensor == c.tensor
              and (c.axes is None or list(c.axes) == list(s.reduction_axes))]
        if not ok:
            fail(f"no reduction writes `{c.tensor}`" + (f" over {', '.join(c.axes)}" if c.axes else "")
                 + "; the reductions are " + (", ".join(f"`{s.text}` (over {', '.join(s.reduction_axes)})"
                                                      for s in reds) or "none"))
    elif k == "reorder_innermost":
        before_inner, after_inner = sf.main.innermost, sf.innermost_after
        if c.loop != after_inner:
            fail(f"after the step the innermost loop of the main statement is `{after_inner}`, not `{c.loop}`")
        elif after_inner == before_inner:
            fail(f"the innermost loop stays `{before_inner}`: the reorder does not change it")
        for acc in c.accesses or []:
            hit = [a for a in sf.accesses if acc == a.text] or [a for a in sf.accesses
                                                               if acc == a.text_after]
            if not hit or hit[0].stride_after is None or abs(hit[0].stride_after) > 1:
                got = hit[0].stride_after if hit else "no such access"
                fail(f"`{acc}` is not contiguous along the new innermost loop `{after_inner}` "
                     f"(stride {got})")
    elif k == "no_reuse" and c.access is None:
        if not sf.touched_once:
            fail(f"`{sf.main.text}` touches some elements more than once (different accesses share "
                 f"them: {sf.working_sets[0].bytes if sf.working_sets else '?'} distinct bytes for "
                 f"{sf.accessed_bytes} bytes of accesses)")
    elif k in ("reuse", "no_reuse"):
        hit = [a for a in sf.accesses if a.text == c.access]
        if not hit:
            fail(f"`{c.access}` is not an access of {where}")
            return bad
        a = hit[0]
        if k == "reuse" and c.side == "after":
            if a.reuse_bytes_after is None:
                fail(f"after the step `{a.text}` is not reused")
            elif c.value is not None and int(c.value) != a.reuse_bytes_after:
                fail(f"after the step the reuse distance of `{a.text}` is {a.reuse_bytes_after} "
                     f"bytes, not {c.value:g}")
            return bad
        if k == "no_reuse":
            if a.reuse_loop is not None:
                fail(f"`{a.text}` is reused across iterations of `{a.reuse_loop}`")
        elif a.reuse_loop is None:
            fail(f"`{a.text}` depends on every loop of its nest ({_fmt_loops(sf.main)}): no element "
                 f"is touched twice, there is no reuse")
        else:
            if c.loop is not None and c.loop != a.reuse_loop:
                fail(f"`{a.text}` is reused across iterations of `{a.reuse_loop}`, not `{c.loop}`")
            if c.value is not None and int(c.value) != a.reuse_bytes:
                fail(f"the reuse distance of `{a.text}` is {a.reuse_bytes} bytes, not {c.value:g}")
            if c.level is not None and hw is not None and hw.level(a.reuse_bytes) != c.level:
                fail(f"{a.reuse_bytes} bytes between reuses of `{a.text}` are held in "
                     f"{hw.level(a.reuse_bytes)}, not {c.level}")
    elif k == "line_return":
        hit = [a for a in sf.accesses if a.text == c.access] or [a for a in sf.accesses
                                                               if a.text_after == c.access]
        if not hit:
            fail(f"`{c.access}` is not an access of {where}")
            return bad
        a = hit[0]
        loop, apart = ((a.line_loop, a.line_apart) if c.side == "before"
                       else (a.line_loop_after, a.line_apart_after))
        if loop is None or apart is None:
            fail(f"`{a.text}` does not take a new line every innermost iteration with a loop that "
                 f"reads the rest of the line later ({c.side} the step)")
        else:
            if c.loop is not None and c.loop != loop:
                fail(f"the next element of each line of `{a.text}` is read at the next iteration "
                     f"of `{loop}`, not `{c.loop}` ({c.side} the step)")
            if c.value is not None and int(c.value) != apart:
                fail(f"{apart} bytes of lines pass between two elements of a line of `{a.text}` "
                     f"({c.side} the step), not {c.value:g}")
            if c.level is not None and hw is not None and hw.level(apart) != c.level:
                fail(f"{apart} bytes are held in {hw.level(apart)}, not {c.level}")
    elif k == "fits_in_cache":
        ws = [w for w in sf.working_sets if w.loop == c.loop]
        if not ws:
            fail(f"`{c.loop}` is not a loop of {where}")
        else:
            w = ws[0]
            if c.value is not None and int(c.value) != w.bytes:
                fail(f"one run of `{w.loop}` touches {w.bytes} bytes, not {c.value:g}")
            if c.level is not None and hw is not None and hw.level(w.bytes) != c.level:
                fail(f"{w.bytes} bytes fit first in {hw.level(w.bytes)} of this CPU "
                     f"(L1 {hw.l1_bytes}, L2 {hw.l2_bytes}, L3 {hw.l3_bytes} bytes), not {c.level}")
    elif k == "staged_in_cache":
        bad += [f"claim {k}: {m}" for m in _staged(c, f)]
    elif k == "loop_extent":
        lps = _loops_named(pf, main, c.loop)
        if not lps:
            fail(f"`{c.loop}` is not a loop {c.side} the step")
        else:
            ext = lps[0].extent
            if c.value is not None and int(c.value) != ext:
                fail(f"`{c.loop}` runs {ext} iterations, not {c.value:g}")
            if c.short and ext > SHORT_LOOP:
                fail(f"`{c.loop}` runs {ext} iterations: not a short loop (at most {SHORT_LOOP})")
    elif k == "parallel_safe":
        lps = _loops_named(f.before, sf.main, c.loop)
        if not lps:
            fail(f"`{c.loop}` is not a loop before the step")
        elif any(lp.carries_dependence for lp in lps):
            fail(f"`{c.loop}` carries a dependence: its iterations are not independent")
    elif k == "predicted_time":
        p = f.predicted
        val = (p.before_s if c.side == "before" else p.after_s) if p is not None else None
        if val is None or c.value is None or not _close(val, c.value):
            fail(f"the cost model predicts {val} s {c.side} the step, not {c.value}")
    elif k == "ranks_below":
        best = {}
        for a in f.alternatives:
            best.setdefault(a.strategy, a)
        p = f.predicted
        chosen_score = None
        if p is not None and p.after_s:
            import math

            from ..analysis.cost_model import blend
            chosen_score = blend(math.log(p.after_s), math.log(p.after_potential_s or p.after_s))

        def score(name):
            if name == f.strategy:
                return chosen_score
            a = best.get(name)
            return a.score if a is not None else None
        sa, so = score(c.strategy), score(c.other)
        if sa is None or so is None:
            fail(f"the cost model ranks no action of `{c.strategy if sa is None else c.other}` here")
        elif not sa > so:
            fail(f"the cost model ranks `{c.strategy}` ({sa:.3f}) ahead of `{c.other}` ({so:.3f}), "
                 f"not below it")
    return bad


def _loops_named(pf, stmt: Optional[StmtFact], var: Optional[str]) -> list:
    """The loop ``var`` of ``stmt``'s own nest; if the statement has none of that name, every
    loop of the program with that name."""
    if pf is None:
        return []
    if stmt is not None:
        own = [lp for lp in pf.loops if lp.var == var and stmt.path[:len(lp.path)] == lp.path]
        if own:
            return own
    return [lp for lp in pf.loops if lp.var == var]


def _staged(c: Claim, f: Facts) -> list[str]:
    """An intermediate produced and consumed inside one iteration of ``c.loop`` after the step:
    the loop must have more than one iteration (otherwise the slice is the whole tensor) and the
    slice size and level must be right."""
    from ..leir import ast as A
    from ..leir.analysis import Analysis
    from ..leir.parser import parse
    from .facts import distinct_bytes

    if f.after is None or not f.after_text:
        return ["there is no after-program"]
    prog = parse(f.after_text)
    an = Analysis(prog)
    lis = [li for li in an.loops if li.loop.var == c.loop]
    if not lis:
        return [f"`{c.loop}` is not a loop after the step"]
    # loop names repeat across nests: the claim is about the one holding both sides
    for li in lis:
        under = an.statements_under(li.path)
        writes = [s for s in under if s.stmt.tensor == c.tensor]
        reads = [s for s in under if any(ld.tensor == c.tensor for ld in A.loads(s.stmt.value))]
        if writes and reads:
            break
    out = []
    if not writes or not reads:
        return [f"`{c.tensor}` is not both produced and consumed inside loop `{c.loop}`"]
    if li.loop.extent <= 1:
        out.append(f"loop `{c.loop}` has {li.loop.extent} iteration: the slice of `{c.tensor}` is the "
                   f"whole tensor, nothing is kept closer to the consumer than before")
    depth = li.depth + 1
    idx = [(c.tensor, s.stmt.index) for s in writes]
    idx += [(c.tensor, ld.index) for s in reads for ld in A.loads(s.stmt.value) if ld.tensor == c.tensor]
    inner_loops = {}
    for s in writes + reads:
        for lp in s.loops[depth:]:
            inner_loops.setdefault(lp.var, lp.extent)
    b, _ = distinct_bytes(prog, idx, list(inner_loops.items()))
    if c.value is not None and int(c.value) != b:
        out.append(f"one iteration of `{c.loop}` produces {b} bytes of `{c.tensor}`, not {c.value:g}")
    hw = f.hardware
    if c.level is not None and hw is not None and hw.level(b) != c.level:
        out.append(f"{b} bytes fit first in {hw.level(b)}, not {c.level}")
    return out


# ============================================================================ prose
_CODE = r"`([^`]+)`"
_P_INNER = re.compile(r"innermost loop (?:is )?" + _CODE)
_P_INNER2 = re.compile(_CODE + r" (?:is|stays|remains) (?:the )?innermost")
_P_MAKES = re.compile(r"(?:makes|puts|brings|moves) " + _CODE + r" innermost|" + _CODE
                      + r" becomes (?:the )?innermost")
_P_STRIDE = re.compile(_CODE + r"(?:[^`.;]{0,40}?)(?<!then )\bstride (-?\d+)")
_P_STRIDE_AFTER = re.compile(_CODE + r"(?:[^`.;]{0,40}?)\bthen stride (-?\d+)")
_P_RED = re.compile(r"\b(?:reduc\w*|accumulat\w*|sums?)\b[^.;]{0,40}?\binto " + _CODE)
_P_FITS = re.compile(r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB)\b[^.;]{0,60}?\bfits? (?:in|into) (L1|L2|L3)\b")
_P_REUSE = re.compile(r"\b(?:reuses?|reused|between reuses)\b", re.I)
_P_SHORT = re.compile(_CODE + r" (?:is|runs) (?:very )?short|short loop " + _CODE
                      + r"|body (?:under " + _CODE + r" )?is small")
_UNITS = {"bytes": 1, "B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def prose_claims(text: str, field: str, f: Facts) -> list[str]:
    """Problems with the claims a text makes in words (see the module docstring)."""
    out: list[str] = []
    sf = f.at_site
    before_inner = {s.innermost for s in f.before.statements}
    after_inner = {s.innermost for s in f.after.statements} if f.after is not None else set()
    for m in _P_MAKES.finditer(text):
        v = m.group(1) or m.group(2)
        if sf is not None and v != sf.innermost_after:
            out.append(f"claim reorder_innermost: {field} says `{v}` becomes innermost, but after the "
                       f"step the main statement's innermost loop is `{sf.innermost_after}`")
        elif sf is not None and sf.innermost_after == sf.main.innermost:
            out.append(f"claim reorder_innermost: {field} says `{v}` becomes innermost, but it already "
                       f"was before the step")
    for pat in (_P_INNER, _P_INNER2):
        for m in pat.finditer(text):
            v = m.group(1)
            if v not in before_inner | after_inner:
                out.append(f"claim innermost_loop: {field} calls `{v}` an innermost loop; the innermost "
                           f"loops are {', '.join(f'`{x}`' for x in sorted(x for x in before_inner if x))}")
    strides: dict[str, set[int]] = {}
    for pf in (f.before,):      # "stride N" is about the program before; "then stride N" after
        for s in pf.statements:
            for a in s.accesses:
                if a.stride is not None:
                    strides.setdefault(a.text, set()).add(a.stride)
    for m in _P_STRIDE.finditer(text):
        acc, n = m.group(1), int(m.group(2))
        if acc in strides and n not in strides[acc] and -n not in strides[acc]:
            out.append(f"claim stride: {field} gives `{acc}` stride {n}; along its innermost loop it "
                       f"moves {', '.join(map(str, sorted(strides[acc])))} elements")
    for m in _P_STRIDE_AFTER.finditer(text):
        acc, n = m.group(1), int(m.group(2))
        hit = [a for a in (sf.accesses if sf is not None else ()) if a.text == acc]
        if hit and (hit[0].stride_after is None or abs(hit[0].stride_after) != abs(n)):
            out.append(f"claim stride: {field} says `{acc}` then moves with stride {n}; after the step "
                       f"it moves {hit[0].stride_after} elements along the innermost loop")
    reds = {s.tensor for pf in (f.before, f.after) if pf is not None for s in pf.statements
            if s.is_reduction}
    for m in _P_RED.finditer(text):
        t = m.group(1)
        if t in f.names_before | f.names_after and t not in reds:
            out.append(f"claim reduction_writes: {field} says a reduction goes into `{t}`; the "
                       f"reductions write {', '.join(f'`{x}`' for x in sorted(reds)) or 'nothing'}")
    hw = f.hardware
    for m in _P_FITS.finditer(text):
        b = float(m.group(1)) * _UNITS[m.group(2)]
        if hw is not None and b > hw.size(m.group(3)) * 1.0001:
            out.append(f"claim fits_in_cache: {field} says {m.group(1)} {m.group(2)} fit in "
                       f"{m.group(3)}, which holds {hw.size(m.group(3))} bytes on this CPU")
    if _P_REUSE.search(text) and sf is not None and all(a.reuse_loop is None for a in sf.accesses) \
            and not re.search(r"\bno (?:element is )?reuse|not reused|without reuse|nothing is reused",
                              text, re.I):
        out.append(f"claim reuse: {field} speaks of reuse, but every access of `{sf.main.text}` "
                   f"depends on every loop of its nest: no element is touched twice")
    for m in _P_SHORT.finditer(text):
        v = m.group(1) or m.group(2) or m.group(3) or (sf.loop if sf is not None else None)
        lps = [lp for lp in f.before.loops if lp.var == v]
        # loop names repeat across nests: "short" holds when one loop of that name is
        if lps and all(lp.extent > SHORT_LOOP for lp in lps):
            out.append(f"claim loop_extent: {field} calls `{v}` short / its body small, but it runs "
                       f"{lps[0].extent} iterations")
    return out


# ============================================================================ no hindsight
def hindsight_problems(cot: Cot, f: Facts) -> list[str]:
    """The bottleneck and the candidates' figures must be what could be known before measuring:
    a limit found at the site in the before-program, and the cost model's predictions."""
    out: list[str] = []
    from .argument import site_findings

    b = cot.bottleneck
    found = site_findings(f)
    if found:
        same = [x for x in found if x.kind == b.kind]
        if not same:
            out.append(f"claim bottleneck: bottleneck.kind is {b.kind!r}, but the limits found at the "
                       f"step's site are {', '.join(repr(x.kind) for x in found)}; the bottleneck is "
                       f"one of them, found from the program before the step")
        elif b.loop is not None and all(x.loop is not None and x.loop != b.loop for x in same):
            out.append(f"claim bottleneck: bottleneck.loop is `{b.loop}`, the {b.kind} limit at the "
                       f"site is about `{same[0].loop}`")
        elif b.tensor is not None and all(x.tensor is not None and x.tensor != b.tensor for x in same):
            out.append(f"claim bottleneck: bottleneck.tensor is `{b.tensor}`, the {b.kind} limit at "
                       f"the site is about `{same[0].tensor}`")
    import json

    def key(strategy, site, params):
        return json.dumps([strategy, site or {}, params or {}], sort_keys=True)
    alts = {key(a.strategy, a.site, a.params): a for a in f.alternatives}
    refs = {(r.strategy, key(r.strategy, r.site, r.params)) for r in f.refusals}
    for n, c in enumerate(cot.candidates):
        if c.verdict == "chosen":
            if c.predicted_s is not None and f.predicted is not None and f.predicted.after_s \
                    and not _close(c.predicted_s, f.predicted.after_s):
                out.append(f"claim predicted_time: candidates[{n}].predicted_s is {c.predicted_s}, the "
                           f"cost model predicts {f.predicted.after_s:.4g} s for the chosen action")
            continue
        if c.refused:
            if (c.strategy, key(c.strategy, c.site, c.params)) not in refs:
                out.append(f"claim refusal: candidates[{n}] (`{c.strategy}`) is not a refusal that "
                           f"concerns this program's dependences or reductions; list refusals only "
                           f"when their reason teaches something")
            continue
        a = alts.get(key(c.strategy, c.site, c.params))
        if c.predicted_s is not None:
            if a is None:
                out.append(f"claim predicted_time: candidates[{n}] (`{c.strategy}` at {c.site}) is not "
                           f"a legal action of this state, so it has no predicted time")
            elif not _close(a.predicted_s, c.predicted_s):
                out.append(f"claim predicted_time: candidates[{n}].predicted_s is {c.predicted_s}, the "
                           f"cost model predicts {a.predicted_s:.4g} s")
    e = cot.expected_effect
    p = f.predicted
    if p is not None:
        if e.predicted_before_s is not None and not _close(e.predicted_before_s, p.before_s):
            out.append(f"claim predicted_time: expected_effect.predicted_before_s is "
                       f"{e.predicted_before_s}, the cost model predicts {p.before_s:.4g} s")
        if e.predicted_after_s is not None and p.after_s is not None \
                and not _close(e.predicted_after_s, p.after_s):
            out.append(f"claim predicted_time: expected_effect.predicted_after_s is "
                       f"{e.predicted_after_s}, the cost model predicts {p.after_s:.4g} s")
    return out


def check_claims(cot: Cot, f: Facts, fields: list[tuple[str, str]]) -> list[str]:
    """Every structured claim, every prose claim of ``fields`` ((name, text) pairs), and the
    no-hindsight rules."""
    out: list[str] = []
    for n, c in enumerate(cot.claims):
        out += [f"claims[{n}]: {p}" for p in check_claim(c, f)]
    out += _coverage(cot, f)
    for name, text in fields:
        out += [f"{name}: {p}" for p in prose_claims(text, name, f)]
    out += hindsight_problems(cot, f)
    return out


def _coverage(cot: Cot, f: Facts) -> list[str]:
    """A list of strides is complete: when the reasoning gives the stride of some access of the
    site's main statement (on one side of the step), it gives every access's, writes included."""
    sf = f.at_site
    if sf is None:
        return []
    out = []
    for side in ("before", "after"):
        named = {c.access for c in cot.claims if c.kind == "stride" and c.side == side
                 and (c.path is None or list(c.path) == list(sf.main.path))}
        if not named:
            continue
        want = [a for a in sf.accesses if side == "before" or a.text_after is not None]
        missing = [a for a in want if a.text not in named and (a.text_after or a.text) not in named]
        if missing:
            out.append("claim stride: the strides listed " + side + " the step leave out "
                       + ", ".join(f"`{a.text}`{' (written)' if a.write else ''}" for a in missing)
                       + f"; every access of `{sf.main.text}` counts, reads and writes")
    return out


def claim_kind(problem: str) -> str:
    """The claim kind a problem line is about ("stride", "reuse"...), for counting."""
    m = re.search(r"claim (\w+):", problem)
    return m.group(1) if m else "other"


__all__ = ["check_claim", "check_claims", "prose_claims", "hindsight_problems", "claim_kind",
           "SHORT_LOOP"]
