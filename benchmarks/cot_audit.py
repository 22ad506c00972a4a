"""Audit a release's reasoning: recompute every claim independently of the writer and of
``steptp.cot.facts``, and print the error rate by claim type.

    PYTHONPATH=. .venv/bin/python benchmarks/cot_audit.py STEPS.parquet [--limit N] [--show K]

For every step with a CoT (schema steptp-cot-2), the structured claims are re-derived from the
LEIR text by brute force — a small evaluator of index expressions, enumeration of iteration
spaces (no interval arithmetic, no affine analysis), address differences for strides, element
sets for footprints and reuse, an element-by-element dependence test — and the cost model's
figures by calling the cost model again on the programs (re-applying each alternative through
the registry). It also checks hindsight (no measured figure of the step in the text), coherence (the
reasoning leads to its decision: the bottleneck is at the step's site and is a limit the step
answers, no alternative is presented as better without a reason, a preparatory step names what
it enables and why, the expected effect supports the decision, no implausible L3 figure; the
``coherence_*`` rows) and derivability (every number in the text recomputed from the prompt by
brute force; the ``derivable`` row). Only the SFT examples must be coherent: other steps may be
incoherent by design (curation keeps them out of SFT). Finally it counts distinct sentence
templates (names and numbers masked).

Iteration spaces above ``--max-points`` are reported as unverified, not as right.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from steptp.leir import ast as A  # noqa: E402
from steptp.leir.parser import parse  # noqa: E402
from steptp.leir.printer import format_expr  # noqa: E402

ITEM = {"bool": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "f16": 2, "bf16": 2, "i32": 4, "u32": 4,
        "f32": 4, "i64": 8, "u64": 8, "f64": 8}


class Unknown(Exception):
    """An index expression that reads a tensor (a gather): not a function of the loops."""


# ============================================================================ brute-force pieces
def ev(e, env):
    if isinstance(e, A.Const):
        return e.value
    if isinstance(e, A.Var):
        return env.get(e.name, 0)
    if isinstance(e, A.Unary):
        x = ev(e.operand, env)
        return (not x) if e.op == "not" else -x
    if isinstance(e, A.Binary):
        x, y = ev(e.lhs, env), ev(e.rhs, env)
        return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "//": lambda: x // y,
                "%": lambda: x % y, "/": lambda: x / y, "<": lambda: x < y, "<=": lambda: x <= y,
                ">": lambda: x > y, ">=": lambda: x >= y, "==": lambda: x == y,
                "!=": lambda: x != y, "and": lambda: x and y, "or": lambda: x or y}[e.op]()
    if isinstance(e, A.Call):
        args = [ev(a, env) for a in e.args]
        if e.func == "where":
            return args[1] if args[0] else args[2]
        if e.func in ("max", "min"):
            return (max if e.func == "max" else min)(args)
        if len(args) == 1:
            return int(args[0])
    raise Unknown(type(e).__name__)


def walk(body, loops=(), guards=(), path=()):
    """(path, assign, loops, guards, loop paths) for every assignment."""
    for n, s in enumerate(body):
        p = path + (n,)
        if isinstance(s, A.Assign):
            yield p, s, loops, guards
        elif isinstance(s, A.Loop):
            yield from walk(s.body, loops + ((s, p),), guards, p)
        elif isinstance(s, A.If):
            yield from walk(s.body, loops, guards + (s.cond,), p)


def loads(e):
    if isinstance(e, A.Load):
        yield e
        for i in e.index:
            yield from loads(i)
    for name in ("operand", "lhs", "rhs"):
        if hasattr(e, name):
            yield from loads(getattr(e, name))
    if isinstance(e, A.Call):
        for a in e.args:
            yield from loads(a)


def accesses(s: A.Assign, guards=()):
    """(tensor, index, write) of a statement: guard and subscript loads, value loads, the
    reduction's read of its target, the write."""
    out = []
    for g in guards:
        out += [(ld.tensor, ld.index, False) for ld in loads(g)]
    for i in s.index:
        out += [(ld.tensor, ld.index, False) for ld in loads(i)]
    out += [(ld.tensor, ld.index, False) for ld in loads(s.value)]
    if s.op in ("+=", "*=", "max=", "min="):
        out.append((s.tensor, s.index, False))
    out.append((s.tensor, s.index, True))
    seen, uniq = set(), []
    for t, idx, w in out:
        key = (text(t, idx), w)
        if key not in seen:
            seen.add(key)
            uniq.append((t, idx, w))
    return uniq


def text(t, idx):
    return t if not idx else f"{t}[{','.join(format_expr(e, compact=True) for e in idx)}]"


def addr(prog, t, idx, env):
    """Row-major element number, or None when a subscript is out of range (never read)."""
    shape = prog.tensors[t].shape
    a = 0
    for e, d in zip(idx, shape):
        x = int(ev(e, env))
        if not 0 <= x < d:
            return None
        a = a * d + x
    return a


def _addr_raw(prog, t, idx, env):
    shape = prog.tensors[t].shape
    a = 0
    for e, d in zip(idx, shape):
        a = a * d + int(ev(e, env))
    return a


def stride(prog, t, idx, var, loops):
    """Address difference per step of ``var``, checked constant over a few points; None when
    it is not (or depends on a tensor)."""
    ext = {lp.var: lp.extent for lp, _ in loops}
    try:
        d = None
        for base in ({}, {v: min(1, e - 1) for v, e in ext.items() if v != var}):
            for k in range(max(1, min(ext.get(var, 2), 1 << 16) - 1)):
                x0 = _addr_raw(prog, t, idx, {**base, var: k})
                x1 = _addr_raw(prog, t, idx, {**base, var: k + 1})
                if d is None:
                    d = x1 - x0
                elif x1 - x0 != d:
                    return None
        return d
    except Unknown:
        return None


def invariant(prog, t, idx, var, loops):
    """Whether ``t[idx]`` is the same element for every value of ``var`` (the other loops at
    their first and second values); False for gathers."""
    ext = {lp.var: lp.extent for lp, _ in loops}
    try:
        for b in (0, 1):
            base = {v: min(b, e - 1) for v, e in ext.items() if v != var}
            if len({_addr_raw(prog, t, idx, {**base, var: k}) for k in range(ext.get(var, 1))}) > 1:
                return False
        return True
    except Unknown:
        return False


def points(loops, fixed=None, cap=300_000):
    vs = [(lp.var, lp.extent) for lp in loops]
    n = math.prod(e for _, e in vs) if vs else 1
    if n > cap:
        raise OverflowError(n)
    for combo in itertools.product(*[range(e) for _, e in vs]):
        yield {**(fixed or {}), **dict(zip((v for v, _ in vs), combo))}


def distinct(prog, accs, loops, guards=(), cap=300_000):
    """Bytes of distinct elements the accesses touch over ``loops`` (others 0), guards honoured."""
    seen = set()
    for env in points(loops, cap=cap):
        try:
            if guards and not all(ev(g, env) for g in guards):
                continue
        except Unknown:
            pass
        for t, idx in accs:
            a = addr(prog, t, idx, env)
            if a is not None:
                seen.add((t, a))
    return sum(ITEM[prog.tensors[t].dtype] for t, _ in seen)


def l3_plausible(hw):
    """The documented rule (docs/dataset.md): a last-level figure counts only up to 8 MiB per
    core; a VM reporting its host's whole L3 to two cores gets none."""
    return 0 < hw["l3_bytes"] <= (8 << 20) * max(1, int(hw["cores"]))


def level(b, hw):
    keys = [("L1", "l1_bytes"), ("L2", "l2_bytes")] + ([("L3", "l3_bytes")] if l3_plausible(hw) else [])
    for name, key in keys:
        if b <= hw[key]:
            return name
    return "DRAM"


def count_ops(e):
    if isinstance(e, (A.Const, A.Var, A.Load)):
        return 0
    if isinstance(e, A.Unary):
        return 1 + count_ops(e.operand)
    if isinstance(e, A.Binary):
        return 1 + count_ops(e.lhs) + count_ops(e.rhs)
    if isinstance(e, A.Call):
        return (0 if e.func in A.DTYPES else 1) + sum(count_ops(a) for a in e.args)
    return 0


def costly_counts(e) -> Counter:
    """Costly operations by name, counted again here: math-library calls, float divisions and
    powers whose exponent is not a whole number of at most 4."""
    out: Counter = Counter()
    for n in subexpressions(e):
        if isinstance(n, A.Call) and n.func in {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
                                                "erf", "sin", "cos", "log2", "exp2", "log1p"}:
            out[n.func] += 1
        elif isinstance(n, A.Call) and n.func == "pow" or isinstance(n, A.Binary) and n.op == "**":
            ex = n.args[1] if isinstance(n, A.Call) else n.rhs
            if not (isinstance(ex, A.Const) and float(ex.value).is_integer() and abs(ex.value) <= 4):
                out["pow"] += 1
        elif isinstance(n, A.Binary) and n.op == "/":
            out["division"] += 1
    return out


def subexpressions(e):
    """Every node of a value expression, not descending into load subscripts."""
    yield e
    for c in ((e.operand,) if isinstance(e, A.Unary) else (e.lhs, e.rhs) if isinstance(e, A.Binary)
              else tuple(e.args) if isinstance(e, A.Call) else ()):
        yield from subexpressions(c)


# ============================================================================ one step
class Step:
    def __init__(self, row: dict, hw: dict):
        self.row, self.hw = row, hw
        self.before = parse(row["before_leir"])
        self.after = parse(row["after_leir"]) if row["after_leir"].strip() else None
        self.site = json.loads(row["site"])
        self.b_stmts = list(walk(self.before.body))
        self.a_stmts = list(walk(self.after.body)) if self.after is not None else []

    def main(self, path=None):
        if path is not None:
            return next((x for x in self.b_stmts if list(x[0]) == list(path)), None)
        sp = tuple(self.site.get("path") or ())
        under = [x for x in self.b_stmts if x[0][:len(sp)] == sp] or self.b_stmts
        def work(x):
            _, s, loops, _ = x
            n = math.prod(lp.extent for lp, _ in loops) if loops else 1
            return (n * (count_ops(s.value) + (1 if s.op != "=" else 0)), len(loops))
        return max(under, key=work)

    def matching_after(self, m):
        if m is None or self.after is None:
            return None
        t = m[1].tensor
        mine = [x for x in self.b_stmts if x[1].tensor == t]
        theirs = [x for x in self.a_stmts if x[1].tensor == t]
        if not theirs:
            return None
        if len(mine) == len(theirs):
            return theirs[mine.index(m)]
        def work(x):
            n = math.prod(lp.extent for lp, _ in x[2]) if x[2] else 1
            return n * (count_ops(x[1].value) + 1)
        return max(theirs, key=work)

    def origin_of_after_innermost(self, m, ma):
        """The before-loop whose per-step address moves equal those of the after-innermost loop
        on every aligned access (found numerically)."""
        if ma is None or not ma[2]:
            return None
        v_after = ma[2][-1][0].var
        acc_b = [(t, i) for t, i, w in accesses(m[1], m[3])]
        acc_a = [(t, i) for t, i, w in accesses(ma[1], ma[3])]
        if [t for t, _ in acc_b] != [t for t, _ in acc_a]:
            return None
        sig_a = [stride(self.after, t, i, v_after, ma[2]) for t, i in acc_a]
        hits = [lp.var for lp, _ in m[2]
                if [stride(self.before, t, i, lp.var, m[2]) for t, i in acc_b] == sig_a]
        return hits[-1] if hits else None


def audit_step(st: Step, cot: dict, tally, wrong_examples, unverified):
    from steptp import strategies as S
    from steptp.analysis import cost_model as CM

    hw = st.hw
    cores = int(hw["cores"])
    pred_b = CM.predict(st.before, cores=cores)
    pred_a = CM.predict(st.after, cores=cores) if st.after is not None else None

    def record(kind, ok, msg=""):
        tally[kind][0] += 1
        if not ok:
            tally[kind][1] += 1
            wrong_examples.append(f"{st.row['trajectory_id']}/{st.row['step_index']} {kind}: {msg}")

    covered = defaultdict(set)
    for c in cot.get("claims", []):
        k = c["kind"]
        m = st.main(c.get("path"))
        ma = st.matching_after(st.main()) if c.get("side") == "after" else None
        try:
            if k == "loop_nest":
                got = [(lp.var, lp.extent) for lp, _ in m[2]]
                record(k, got == list(zip(c["loops"], c["extents"] or [e for _, e in got])), f"{got}")
            elif k == "innermost_loop":
                got = m[2][-1][0].var if m[2] else None
                record(k, got == c["loop"], f"innermost {got}, claimed {c['loop']}")
            elif k == "stride":
                if c.get("side") == "after":
                    mm = st.main()
                    accs_b = accesses(mm[1], mm[3])
                    accs_a = accesses(ma[1], ma[3]) if ma else []
                    names = [text(t, i) for t, i, _ in accs_b]
                    k_ = names.index(c["access"]) if c["access"] in names else None
                    if k_ is None or len(accs_a) != len(accs_b):
                        record(k, False, f"{c['access']} not found after")
                        continue
                    t, i, w = accs_a[k_]
                    got = stride(st.after, t, i, ma[2][-1][0].var, ma[2]) if ma[2] else 0
                    covered["after"].add((t, text(*accs_b[k_][:2]), w))
                else:
                    accs = accesses(m[1], m[3])
                    hit = [(t, i, w) for t, i, w in accs if text(t, i) == c["access"]]
                    if not hit:
                        record(k, False, f"{c['access']} not an access")
                        continue
                    t, i, w = hit[0]
                    got = stride(st.before, t, i, m[2][-1][0].var, m[2]) if m[2] else 0
                    for t2, i2, w2 in hit:
                        covered[("before", m[0])].add((t2, text(t2, i2), w2))
                want = None if c.get("value") is None else int(c["value"])
                record(k, got == want, f"{c['access']}: stride {got}, claimed {c['value']}")
            elif k == "reduction_writes":
                prog = st.before
                ok = False
                for p, s, loops, _ in walk(prog.body):
                    if s.tensor == c["tensor"] and s.op != "=":
                        used = {v for e in s.index for v in A.free_vars(e)}
                        axes = [lp.var for lp, _ in loops if lp.var not in used]
                        ok = ok or c.get("axes") is None or axes == c["axes"]
                record(k, ok, f"no reduction into {c['tensor']} over {c.get('axes')}")
            elif k == "reorder_innermost":
                mm = st.main()
                ma = st.matching_after(mm)
                org = st.origin_of_after_innermost(mm, ma)
                before_inner = mm[2][-1][0].var if mm[2] else None
                ok = org == c["loop"] and org != before_inner
                accs_b = accesses(mm[1], mm[3])
                accs_a = accesses(ma[1], ma[3]) if ma else []
                for acc in c.get("accesses") or []:
                    names = [text(t, i) for t, i, _ in accs_b]
                    if acc not in names or len(accs_a) != len(accs_b):
                        ok = False
                        continue
                    t, i, _ = accs_a[names.index(acc)]
                    sa = stride(st.after, t, i, ma[2][-1][0].var, ma[2])
                    ok = ok and sa is not None and abs(sa) <= 1
                record(k, ok, f"after innermost walks {org} (before {before_inner}), claimed {c['loop']}")
            elif k == "no_reuse" and c.get("access") is None:
                # the whole statement touches each element once: distinct = accessed
                accs = accesses(m[1], m[3])
                uniq = {(t, text(t, i)): (t, i) for t, i, _ in accs}
                seen, count = set(), 0
                for env in points([lp for lp, _ in m[2]]):
                    try:
                        if m[3] and not all(ev(g, env) for g in m[3]):
                            continue
                    except Unknown:
                        pass
                    for t, i in uniq.values():
                        a = addr(st.before, t, i, env)
                        if a is not None:
                            seen.add((t, a))
                            count += 1
                record(k, len(seen) == count, f"{count - len(seen)} repeated element touches")
            elif k == "line_return":
                # the innermost loop outside the innermost along which the access moves by less
                # than a line (by address differences), and the distinct lines every access of
                # the statement touches while the loops inside it run (others at 0)
                mm = st.main()
                side_after = c.get("side") == "after"
                sm = st.matching_after(mm) if side_after else m
                prog = st.after if side_after else st.before
                accs_b = accesses(mm[1], mm[3])
                accs_s = accesses(sm[1], sm[3]) if sm else []
                names = [text(t, i) for t, i, _ in accs_b]
                if c["access"] not in names or len(accs_s) != len(accs_b) or not sm[2]:
                    record(k, False, f"{c['access']} not found")
                    continue
                t, i, _ = accs_s[names.index(c["access"])]
                isz = ITEM[prog.tensors[t].dtype]
                line = (hw or {}).get("line_bytes", 64)
                loops = sm[2]
                inner_st = stride(prog, t, i, loops[-1][0].var, loops)
                got_loop, got = None, None
                if inner_st is not None and abs(inner_st) * isz >= line:
                    for d in range(len(loops) - 2, -1, -1):
                        if loops[d][0].extent < 2:
                            continue
                        sd = stride(prog, t, i, loops[d][0].var, loops)
                        if sd is None:
                            break
                        if sd != 0 and abs(sd) * isz < line:
                            got_loop = loops[d][0].var
                            seen = set()
                            for env in points([lp for lp, _ in loops[d + 1:]]):
                                try:
                                    if sm[3] and not all(ev(g, env) for g in sm[3]):
                                        continue
                                except Unknown:
                                    pass
                                for tt, ii, _ in accs_s:
                                    a = addr(prog, tt, ii, env)
                                    if a is not None:
                                        seen.add((tt, a * ITEM[prog.tensors[tt].dtype] // line))
                            got = len(seen) * line
                            break
                record(k, got_loop == c.get("loop") and got == int(c["value"])
                       and (c.get("level") is None or level(got, hw) == c["level"]),
                       f"{c['access']} ({'after' if side_after else 'before'}): next element of "
                       f"its line at `{got_loop}` after {got} bytes, claimed `{c.get('loop')}` "
                       f"{c['value']}")
            elif k == "reuse" and c.get("side") == "after":
                mm = st.main()
                ma = st.matching_after(mm)
                accs_b, accs_a = accesses(mm[1], mm[3]), accesses(ma[1], ma[3])
                names = [text(t, i) for t, i, _ in accs_b]
                t, i, _ = accs_a[names.index(c["access"])]
                inv = None
                for d in range(len(ma[2]) - 1, -1, -1):
                    if ma[2][d][0].extent > 1 and invariant(st.after, t, i, ma[2][d][0].var, ma[2]):
                        inv = d
                        break
                inner = [lp for lp, _ in ma[2][inv + 1:]] if inv is not None else []
                b = distinct(st.after, [(tt, ii) for tt, ii, _ in accs_a], inner, ma[3]) if inner else 0
                record(k, inv is not None and b == int(c["value"]),
                       f"after: {c['access']} reuse {b} bytes, claimed {c['value']}")
            elif k in ("reuse", "no_reuse"):
                accs = accesses(m[1], m[3])
                hit = [(t, i) for t, i, w in accs if text(t, i) == c["access"]]
                if not hit:
                    record(k, False, "no such access")
                    continue
                t, i = hit[0]
                inv = None
                for d in range(len(m[2]) - 1, -1, -1):
                    if m[2][d][0].extent > 1 and invariant(st.before, t, i, m[2][d][0].var, m[2]):
                        inv = d
                        break
                if k == "no_reuse":
                    record(k, inv is None, f"{c['access']} is invariant in {m[2][inv][0].var if inv is not None else None}")
                    continue
                if inv is None:
                    record(k, False, f"{c['access']} is never reused")
                    continue
                ok = c.get("loop") in (None, m[2][inv][0].var)
                if c.get("value") is not None:
                    inner = [lp for lp, _ in m[2][inv + 1:]]
                    b = distinct(st.before, [(tt, ii) for tt, ii, _ in accs], inner, m[3]) if inner else 0
                    ok = ok and b == int(c["value"])
                    if c.get("level") and b:
                        ok = ok and level(b, hw) == c["level"]
                record(k, ok, f"{c['access']} reuse across {m[2][inv][0].var}")
            elif k == "fits_in_cache":
                d = [lp.var for lp, _ in m[2]].index(c["loop"])
                accs = [(t, i) for t, i, _ in accesses(m[1], m[3])]
                b = distinct(st.before, accs, [lp for lp, _ in m[2][d:]], m[3])
                record(k, b == int(c["value"]) and (c.get("level") is None or level(b, hw) == c["level"]),
                       f"one run of {c['loop']}: {b} bytes ({level(b, hw)}), claimed {c['value']} {c.get('level')}")
            elif k == "staged_in_cache":
                prog = st.after
                lp_hits = [(lp, p) for _, _, loops, _ in st.a_stmts for lp, p in loops if lp.var == c["loop"]]

                def holds_both(hit):   # loop names repeat across nests: the one holding both
                    sub = [x for x in st.a_stmts if x[0][:len(hit[1])] == hit[1]]
                    return any(x[1].tensor == c["tensor"] for x in sub) and any(
                        ld.tensor == c["tensor"] for x in sub for ld in loads(x[1].value))
                lp, lpath = next((h for h in lp_hits if holds_both(h)), lp_hits[0])
                under = [x for x in st.a_stmts if x[0][:len(lpath)] == lpath]
                idx, inner = [], {}
                for p, s, loops, g in under:
                    if s.tensor == c["tensor"]:
                        idx.append((s.tensor, s.index))
                    idx += [(ld.tensor, ld.index) for ld in loads(s.value) if ld.tensor == c["tensor"]]
                    depth = [q for _, q in loops].index(lpath) + 1
                    for l2, _ in loops[depth:]:
                        inner.setdefault(l2.var, l2)
                b = distinct(prog, idx, list(inner.values()))
                record(k, lp.extent > 1 and b == int(c["value"]) and level(b, hw) == c["level"],
                       f"{c['tensor']} per iteration of {c['loop']} ({lp.extent}): {b} bytes")
            elif k == "loop_extent":
                prog = st.before if c.get("side", "before") == "before" else st.after
                mm = m if c.get("side", "before") == "before" else ma
                own = [lp for lp, _ in (mm[2] if mm else ()) if lp.var == c["loop"]]
                if not own:
                    own = [lp for _, _, loops, _ in walk(prog.body) for lp, _ in loops if lp.var == c["loop"]]
                ok = bool(own) and (c.get("value") is None or own[0].extent == int(c["value"]))
                if c.get("short"):
                    ok = ok and own[0].extent <= 16
                record(k, ok, f"{c['loop']} extent {own[0].extent if own else None}")
            elif k == "parallel_safe":
                d = [lp.var for lp, _ in m[2]].index(c["loop"])
                lp, lpath = m[2][d]
                under = [x for x in st.b_stmts if x[0][:len(lpath)] == lpath]
                touched = defaultdict(set)    # element -> iterations of the loop writing it
                readers = defaultdict(set)
                for p, s, loops, g in under:
                    for env in points([l2 for l2, _ in loops]):
                        if g and not all(ev(x, env) for x in g):
                            continue
                        w = (s.tensor, addr(st.before, s.tensor, s.index, env))
                        touched[w].add(env[lp.var])
                        for ld in loads(s.value):
                            readers[(ld.tensor, addr(st.before, ld.tensor, ld.index, env))].add(env[lp.var])
                carried = any(len(v) > 1 for v in touched.values()) or any(
                    len(readers.get(e, set()) | it) > 1 for e, it in touched.items())
                record(k, not carried, f"{c['loop']} carries a dependence")
            elif k == "predicted_time":
                want = pred_b if c.get("side", "before") == "before" else pred_a
                record(k, want is not None and abs(want - c["value"]) <= 0.01 * want, f"{want} vs {c['value']}")
            elif k == "ranks_below":
                # the search's score of the chosen result and of the listed candidate, re-derived
                def score_of(name):
                    if name == st.row["strategy"]:
                        return CM.score(st.after, cores=cores) if st.after is not None else None
                    cand = next((x for x in cot["candidates"] if x["strategy"] == name
                                 and x["verdict"] != "chosen" and not x.get("refused")), None)
                    if cand is None:
                        return None
                    new = S.apply(st.before, name, cand.get("site") or {}, cand.get("params") or {})
                    return CM.score(new, cores=cores)
                sa, so = score_of(c["strategy"]), score_of(c["other"])
                record(k, sa is not None and so is not None and sa > so,
                       f"{c['strategy']} {sa} not below {c['other']} {so}")
            else:
                record(k, False, "unknown claim kind")
        except OverflowError:
            unverified[k] += 1
            tally[k][0] -= 0
    # every access of the main statement has a stride claim (reads and writes), when any has
    mm = st.main()
    if covered.get(("before", mm[0])):
        want = {(t, text(t, i), w) for t, i, w in accesses(mm[1], mm[3])}
        record("stride_coverage", covered[("before", mm[0])] >= want,
               f"missing {sorted(x[1] for x in want - covered[('before', mm[0])])}")
    # candidates: predicted times re-derived by applying the action
    for cand in cot.get("candidates", []):
        if cand.get("predicted_s") is None or cand["verdict"] == "chosen":
            continue
        try:
            new = S.apply(st.before, cand["strategy"], cand.get("site") or {}, cand.get("params") or {})
            got = CM.predict(new, cores=cores)
            record("candidate_prediction", abs(got - cand["predicted_s"]) <= 0.01 * got,
                   f"{cand['strategy']}: {got} vs {cand['predicted_s']}")
        except Exception as e:  # noqa: BLE001
            record("candidate_prediction", False, f"{cand['strategy']} does not apply: {e}")
        if cand.get("refused"):
            record("candidate_refusal", False, "a refused candidate with a prediction")
    for cand in cot.get("candidates", []):
        if cand.get("refused"):
            v = S.check(st.before, cand["strategy"], cand.get("site") or {}, cand.get("params") or {})
            record("candidate_refusal", not v.ok, f"{cand['strategy']} is legal")
    coherence(st, cot, record)
    # hindsight: no measured figure of the step in the text
    from steptp.cot.validate import cited_numbers, number_matches
    meas = [x for x in (st.row.get("step_speedup"),) if x]
    a = st.row.get("after") or {}
    if a:
        meas.append(a["median_s"])
    allowed = [pred_b] + ([pred_a, pred_b / pred_a, pred_a / pred_b] if pred_a else []) \
        + [cand.get("predicted_s") or 0 for cand in cot["candidates"]]
    body = st.row["cot_text"].split("</think>")[0]
    leak = [n for n, u, _ in cited_numbers(body) if u in ("x", "×", "s", "ms", "µs", "us", "ns")
            and number_matches(n, u, meas) and not number_matches(n, u, allowed)]
    record("hindsight_numbers", not leak, f"measured figures in the text: {leak}")
    derivable(st, cot, body, record)
    return pred_b


# ============================================================================ coherence
_BETTER = re.compile(r"\b(ranks? (?:it |them )?(?:ahead|higher|above|first)|better than|faster "
                     r"(?:by itself )?than the chosen|faster by itself|ahead of (?:this|the chosen)|"
                     r"cost model (?:prefers|ranks) it|more promising|outperforms?)\b", re.I)
_NOT_NOW = re.compile(r"\b(because|since|not (?:yet )?legal|only after|cannot|requires|would "
                      r"(?:break|undo|lose))\b", re.I)
_WHY = re.compile(r"\b(needs?|requires?|no legal|not legal|creates?|only after|exists only|cannot|"
                  r"before this step)\b", re.I)
_ASSIGN = re.compile(r"`([^`]*?(?:\+=|max=|min=|[^=!<>]=[^=])[^`]*)`")


def coherence(st: Step, cot: dict, record) -> None:
    """Does the reasoning lead to its decision (docs/dataset.md, "Reasoning")? Re-derived here
    from the program text and the stored JSON: the bottleneck is about the statement and loops
    the step acts on and is a limit the applied (or, for a preparatory step, the enabled)
    strategy answers; no rejected alternative is presented as better without a reason it is not
    taken now; a preparatory step names what it enables and why; the expected effect supports
    the decision; no implausible L3 figure."""
    from steptp.cot.argument import ANSWERS   # the declared table, not a computation

    b, e = cot["bottleneck"], cot["expected_effect"]
    sp = tuple(st.site.get("path") or ())
    here = [x for x in st.b_stmts if x[0][:len(sp)] == sp] or st.b_stmts
    texts = {" ".join(format_stmt_text(x[1]).split()) for x in here}
    quoted = [" ".join(m.group(1).split()) for m in _ASSIGN.finditer(b["text"])]
    m = st.main()
    nest = [lp.var for lp, _ in m[2]]
    ok = all(any(q in t for t in texts) for q in quoted) and (
        b.get("loop") is None or b["kind"] == "structure" or b["loop"] in nest)
    mover = e.get("enables") if e["direction"] == "preparatory" else st.row["strategy"]
    ok = ok and mover in ANSWERS.get(b["kind"], ())
    record("coherence_site", ok, f"bottleneck {b['kind']} at {b.get('loop')} / {quoted} for "
                                 f"`{mover}` at {sp}")
    chosen = next((c for c in cot["candidates"] if c["verdict"] == "chosen"), {})
    bad = [c["strategy"] for c in cot["candidates"] if c["verdict"] == "rejected"
           and not c.get("refused") and (_BETTER.search(c["reason"]) or (
               c.get("predicted_s") is not None and chosen.get("predicted_s") is not None
               and c["predicted_s"] < chosen["predicted_s"])) and not _NOT_NOW.search(c["reason"])]
    bad += [c["other"] for c in cot.get("claims", []) if c["kind"] == "ranks_below"
            and c.get("strategy") == st.row["strategy"]]
    record("coherence_ranking", not bad, f"presented as better than the chosen step: {bad}")
    if e["direction"] == "preparatory":
        en = e.get("enables") or ""
        record("coherence_preparatory", bool(en) and f"`{en}`" in e["text"] and bool(_WHY.search(e["text"])),
               f"enables {en!r}: {e['text'][:120]}")
    contra = {"faster": r"\b(slower|no real change|about the same|no gain)\b",
              "slower": r"\b(faster|speeds? up)\b"}.get(e["direction"])
    record("coherence_effect", e["direction"] in ("faster", "preparatory")
           and not (contra and re.search(contra, e["text"], re.I)),
           f"expected {e['direction']}: {e['text'][:120]}")
    body = st.row["cot_text"].split("</think>")[0]
    record("coherence_cache", l3_plausible(st.hw) or not re.search(r"\bL3\b", body),
           "an L3 figure the hardware cannot plausibly give these cores")


def format_stmt_text(s):
    from steptp.leir.printer import format_stmt

    return format_stmt(s).strip()


# ============================================================================ derivable
def derivable(st: Step, cot: dict, body: str, record) -> None:
    """Every number in the reasoning is recomputed from the prompt by brute force: shapes,
    element counts and bytes, loop extents and iteration counts, operation counts and the
    intensity, strides (elements, bytes, elements per cache line) along every innermost loop,
    the hardware line's figures and lanes, distinct bytes between reuses and per run of each
    loop, the decision's and candidates' site/params, the program's constants; a number that
    matches none is one a model could not derive."""
    from steptp.cot.validate import SMALL_COUNTS, cited_numbers, number_matches

    hw = st.hw
    vals: set = {hw[k] for k in ("l1_bytes", "l2_bytes", "l3_bytes", "vector_bits", "cores",
                                 "line_bytes")}
    per_stmt: dict[int, list[tuple[int, int]]] = {0: [], 1: []}   # (ops, costly) per statement
    for side, (prog, stmts) in enumerate(((st.before, st.b_stmts), (st.after, st.a_stmts))):
        if prog is None:
            continue
        read, written = set(), set()
        total_ops = 0
        vals.add(len(stmts))
        for t in prog.tensors.values():
            isz = ITEM[t.dtype]
            vals |= set(t.shape) | {math.prod(t.shape), math.prod(t.shape) * isz, isz, len(t.shape),
                                   int(hw["vector_bits"]) // (8 * isz), int(hw["line_bytes"]) // isz}
        for p, s, loops, g in stmts:
            ext = [lp.extent for lp, _ in loops]
            vals |= set(ext) | {math.prod(ext[k:]) for k in range(len(ext) + 1)} | {len(ext)}
            ops = count_ops(s.value) + (1 if s.op != "=" else 0)
            # a subexpression computed more than once: its count, its operations, what sharing saves
            subs = Counter(format_expr(e) for e in subexpressions(s.value) if count_ops(e) > 0)
            for e in subexpressions(s.value):
                n_ = subs.get(format_expr(e), 0)
                if n_ >= 2:
                    vals |= {n_, count_ops(e), (n_ - 1) * count_ops(e)}
            n = math.prod(ext) if ext else 1
            total_ops += ops * n
            vals |= {ops * n}
            # costly operations: per name, in all, and over the whole iteration space
            cc = costly_counts(s.value)
            vals |= set(cc.values()) | {sum(cc.values()), count_ops(s.value)} \
                | {c * n for c in cc.values()}
            per_stmt[side].append((count_ops(s.value), sum(cc.values())))
            for t, i, w in accesses(s, g):
                (written if w else read).add(t)
                if loops:
                    try:
                        d = stride(prog, t, i, loops[-1][0].var, loops)
                    except Exception:  # noqa: BLE001 - a gather: no constant stride
                        d = None
                    if d is not None:
                        sb = abs(d) * ITEM[prog.tensors[t].dtype]
                        vals |= {abs(d), sb, max(1, int(hw["line_bytes"]) // sb) if sb else 0}

        moved = sum(math.prod(t.shape) * ITEM[t.dtype] for t in prog.inputs if t.name in read) \
            + sum(math.prod(t.shape) * ITEM[t.dtype] for t in prog.outputs if t.name in written)
        vals |= {total_ops, moved, total_ops / moved if moved else 0}
        vals |= {float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?",
                                               st.row["before_leir" if prog is st.before else "after_leir"])}
    # what a rewrite saves: a statement's operations and costly operations before less after
    for (ob, cb), (oa, ca) in itertools.product(per_stmt[0], per_stmt[1]):
        vals |= {ob - oa, cb - ca}

    def walk_json(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from walk_json(x)
        elif isinstance(v, list):
            for x in v:
                yield from walk_json(x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v
    for c in cot["candidates"]:
        vals |= set(walk_json(c.get("site") or {})) | set(walk_json(c.get("params") or {}))
    # figures the claims state and the audit verified above (reuse distances, staged slices,
    # the lines between two elements of one line)
    vals |= {c["value"] for c in cot.get("claims", []) if c.get("value") is not None
             and c["kind"] in ("reuse", "fits_in_cache", "staged_in_cache", "line_return")}
    quotes = [st.row["before_leir"], st.row["after_leir"]]

    def unmatched(vals):
        vals = [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
        return [(n, u) for n, u, _ in cited_numbers(body, quotes)
                if not (not u and float(n.replace(",", "")) in SMALL_COUNTS)
                and not number_matches(n, u, vals)]
    bad = unmatched(vals)
    if bad:
        # the expensive figures, only when a number needs them: distinct bytes per run of each
        # loop of the site's statement (working sets, reuse distances), and the bytes its
        # accesses move over the whole nest, each access's distinct elements
        for prog in (st.before, st.after):
            m = st.main() if prog is st.before else st.matching_after(st.main())
            if prog is None or m is None:
                continue
            accs_m = [(t2, i2) for t2, i2, _ in accesses(m[1], m[3])]
            for k in range(len(m[2]), -1, -1):
                inner = [lp for lp, _ in m[2][k:]]
                if math.prod(lp.extent for lp in inner) > 100_000:
                    break
                vals.add(distinct(prog, accs_m, inner, m[3]) if inner else 0)
            whole = [lp for lp, _ in m[2]]
            if whole and math.prod(lp.extent for lp in whole) <= 600_000:
                vals.add(sum(distinct(prog, [a], whole, m[3], cap=600_000) for a in dict.fromkeys(accs_m)))
        bad = unmatched(vals)
    bad = [f"{n}{(' ' + u) if u else ''}" for n, u in bad]
    record("derivable", not bad, f"numbers no rule computes from the prompt: {bad}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("steps", type=Path, help="a steps table with the cot column (steptp cot -o)")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--show", type=int, default=10, help="wrong claims to print")
    args = ap.parse_args()
    import polars as pl

    from steptp.cot.facts import GENERIC

    rows = [r for r in pl.read_parquet(args.steps).iter_rows(named=True) if r["cot"] and r["cot"] != "{}"]
    if args.limit:
        rows = rows[:args.limit]
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrong: list[str] = []
    unverified: Counter = Counter()
    sft_rows = {n for n, r in enumerate(rows) if r.get("sft")}
    incoherent, underivable = set(), 0
    for n, r in enumerate(rows):
        cot = json.loads(r["cot"])
        hw = cot.get("hardware") or GENERIC.to_dict()
        st = Step(r, hw)
        before = len(wrong)
        audit_step(st, cot, tally, wrong, unverified)
        mine = wrong[before:]
        if any(" coherence_" in w for w in mine):
            incoherent.add(n)
        underivable += sum(1 for w in mine if " derivable: " in w)
    from steptp.cot.run import template_counts
    from steptp.records import StepRecord

    # a release's data/steps.parquet adds split, step_key and sft: read the record's own fields
    fields = set(StepRecord.model_fields)
    recs = [StepRecord.from_row({k: v for k, v in r.items() if k in fields}) for r in rows]
    tc = template_counts(recs)
    facts = {k: v for k, v in tally.items() if not k.startswith("coherence_")}
    total = sum(v[0] for v in facts.values())
    bad = sum(v[1] for v in facts.values())
    print(f"cot audit: {len(rows)} steps, {total} facts checked, {bad} wrong "
          f"({(bad / total if total else 0):.2%}); coherence below (only SFT examples must be)")
    print(f"{'claim type':26s} {'checked':>8s} {'wrong':>6s} {'rate':>7s}")
    for k in sorted(tally):
        n, w = tally[k]
        print(f"{k:26s} {n:8d} {w:6d} {(w / n if n else 0):7.2%}")
    if unverified:
        print("unverified (iteration space too large):", dict(unverified))
    print(f"incoherent reasoning: {len(incoherent)} of {len(rows)} steps"
          + (f"; SFT examples: {len(incoherent & sft_rows)} of {len(sft_rows)}" if sft_rows else "")
          + f"; steps citing an underivable number: {underivable}")
    print(f"templates: {tc['distinct_templates']} distinct over {tc['sentences']} sentences; "
          f"{tc['distinct_openings']} opening patterns")
    agree = [json.loads(r["cot"]).get("measured", {}).get("prediction_agrees") for r in rows]
    print(f"prediction vs measurement: {sum(a is True for a in agree)} agree, "
          f"{sum(a is False for a in agree)} disagree, {sum(a is None for a in agree)} untimed")
    for line in wrong[:args.show]:
        print("  WRONG", line)
    # a non-SFT step may be incoherent by design (curation keeps it out of SFT): only facts,
    # and the SFT examples' coherence, fail the audit
    bad_facts = sum(v[1] for k, v in tally.items() if not k.startswith("coherence_"))
    return 1 if bad_facts or (incoherent & sft_rows if sft_rows else False) else 0


if __name__ == "__main__":
    raise SystemExit(main())
