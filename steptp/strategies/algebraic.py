"""The algebraic family: SymPy rewrites of one statement's value expression.

Mechanism (every strategy here): the value of a floating-point assignment is converted to SymPy
with one symbol per distinct tensor access (``_sympy.Ctx``), one SymPy function is applied, the
result is converted back to LEIR deterministically, and the rewrite is accepted only if

1. SymPy proves ``new - old == 0`` (``_sympy.prove_equal``: expand, cancel, simplify);
2. a numeric spot check of the *emitted* LEIR expression against the original agrees
   (``_sympy.numeric_agree``; catches any back-conversion slip);
3. the result is safe (``_sympy.safety``): it divides by nothing that is not provably nonzero or
   already a denominator (factor) of the original, and takes no log / sqrt / rsqrt / fractional
   power of an argument that is not provably positive (nonnegative for sqrt) or already taken by
   the original. Positivity comes only from the program: intermediates whose every write is
   provably positive (``exp(..)``, ``x*x + 1.0``...) get positive symbols; inputs never do.

A reduction (``S[i] += f``) rewrites its per-iteration value ``f``: the accumulation is untouched.
Sites are the float assignments (``{"path": [...], "loops": [enclosing loop vars]}``); strategies
that need a symbol take ``{"symbol": "A[i]"}`` (the LEIR text of one access). A transform that
leaves the SymPy expression unchanged returns the program as is (the registry drops the no-op).
Exactness: ``algebraic`` (a mathematical identity; rounding differs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import sympy as sp
from sympy.core.function import AppliedUndef

from ..leir import ast as A
from . import _sympy as SY
from ..leir.ast import iter_stmts, node_at
from ..leir.nav import enclosing_loops, replace_at
from ._ir import stabilized_exp
from .base import OK, Site, Strategy, refuse
from .registry import register

_CACHE: dict[tuple, tuple[A.Expr | None, str]] = {}
_POS_CACHE: dict[A.Program, frozenset[str]] = {}


def _positive(program: A.Program) -> frozenset[str]:
    key = A.strip_pos(program)
    r = _POS_CACHE.get(key)
    if r is None:
        if len(_POS_CACHE) > 256:
            _POS_CACHE.clear()
        r = _POS_CACHE[key] = SY.positive_tensors(key)
    return r


def _stmt(program: A.Program, site: Site) -> tuple[A.Assign | None, str]:
    node = node_at(program, site.path)
    if not isinstance(node, A.Assign):
        return None, f"no assignment at path {list(site.path)}"
    t = program.tensors.get(node.tensor)
    if t is None or t.dtype not in A.FLOAT_DTYPES:
        return None, f"{node.tensor} is not a floating-point tensor"
    if SY.has_nonfinite(node.value):
        return None, "the value holds a non-finite literal"
    if SY.count_nodes(node.value) > SY.MAX_NODES:
        return None, f"the value has more than {SY.MAX_NODES} nodes (too large for SymPy)"
    return node, ""


def _fmt_params(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


class _SympyStrategy(Strategy):
    family = "algebraic"
    exactness = "algebraic"
    targets = frozenset({"cpu", "gpu"})
    needs_symbol = False
    shrinks = False  # refuse a result with more nodes than the value (a simplifying rewrite)
    rational = True  # treat exp/log/roots/opaque calls as atoms: a rational-function rewrite

    # the SymPy transform: (expression, ctx, params) -> expression; raise ValueError to refuse
    def transform(self, e: sp.Expr, ctx: SY.Ctx, params: Mapping[str, Any]) -> sp.Expr:
        raise NotImplementedError

    def noop_reason(self, e: sp.Expr, ctx: SY.Ctx, params: Mapping[str, Any]) -> str | None:
        """Why the transform changed nothing, when that is worth refusing (not just a no-op)."""
        return None

    # ------------------------------------------------------------------ framework
    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if isinstance(s, A.Assign):
                site = Site.make(p, [lp.var for lp in enclosing_loops(program, p)])
                if _stmt(program, site)[0] is not None:
                    out.append(site)
        return out

    def params(self, program, site, rng=None):
        if not self.needs_symbol:
            return [{}]
        node, _ = _stmt(program, site)
        if node is None:
            return []
        ctx = SY.Ctx(_positive(program))
        try:
            e = ctx.to_sympy(node.value)
        except SY.Unsupported:
            return []
        return [{"symbol": t} for t in ctx.access_texts(e)]

    def _attempt(self, program: A.Program, site: Site, params: Mapping[str, Any]
                 ) -> tuple[A.Expr | None, str]:
        node, why = _stmt(program, site)
        if node is None:
            return None, why
        pos = _positive(program)
        key = (self.name, A.strip_pos(node.value), pos, _fmt_params(params))
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        if len(_CACHE) > 4096:
            _CACHE.clear()
        r = self._compute(node.value, pos, params)
        _CACHE[key] = r
        return r

    def _compute(self, value: A.Expr, pos: frozenset[str], params: Mapping[str, Any]
                 ) -> tuple[A.Expr | None, str]:
        ctx = SY.Ctx(pos)
        try:
            old = ctx.to_sympy(value)
        except SY.Unsupported as e:
            return None, f"cannot convert the value to SymPy: {e}"
        if self.needs_symbol:
            text = params.get("symbol")
            if not isinstance(text, str) or ctx.symbol_named(text) is None:
                return None, f"symbol {text!r} is not a tensor access of the value"
        try:
            if self.rational:
                atomized, back = _atomize(old)
                new = self.transform(atomized, ctx, params).xreplace(back)
            else:
                new = self.transform(old, ctx, params)
        except (ValueError, TypeError, NotImplementedError, sp.PolynomialError) as e:
            return None, f"{self.name} does not apply: {e}"
        if new == old:
            why = self.noop_reason(old, ctx, params)
            if why:
                return None, why
            return value, ""  # a no-op: the registry drops it
        try:
            emitted = ctx.from_sympy(new)
            back = ctx.to_sympy(emitted)
        except SY.Unsupported as e:
            return None, f"the result has no LEIR spelling: {e}"
        if not SY.prove_equal(new, old):
            return None, "SymPy could not prove new - old == 0"
        if not SY.numeric_agree(ctx, back, old):
            return None, "the emitted expression fails the numeric spot check"
        if self.shrinks and SY.count_nodes(emitted) > SY.count_nodes(value):
            return None, (f"{self.name} does not apply: the result is larger than the value "
                          f"({SY.count_nodes(emitted)} > {SY.count_nodes(value)} nodes)")
        why = SY.safety(ctx, value, emitted)
        if why:
            return None, why
        return emitted, ""

    #: the rewrite can split an exp(x - M) (refused where M is a running maximum)
    splits_exp = False

    def check(self, program, site, params):
        if self.splits_exp:
            node = node_at(program, site.path)
            unsafe = isinstance(node, A.Assign) and stabilized_exp(program, node.value)
            if unsafe:
                return refuse(f"{self.name} does not apply: {unsafe}")
        new, why = self._attempt(program, site, params)
        return OK if new is not None else refuse(why)

    def rewrite(self, program, site, params):
        new, _ = self._attempt(program, site, params)
        node = node_at(program, site.path)
        return replace_at(program, site.path, [replace(node, value=new)])


def _atomize(e: sp.Expr) -> tuple[sp.Expr, dict[sp.Symbol, sp.Expr]]:
    """Replace every non-rational subterm (exp, log, abs, opaque calls, non-integer powers) by a
    symbol ``_a0, _a1, ...`` (numbered in SymPy's sort order: deterministic), keeping its sign
    assumptions; returns the expression and the map back."""
    found = [a for a in sp.preorder_traversal(e)
             if isinstance(a, (sp.exp, sp.log, sp.Abs, AppliedUndef))
             or isinstance(a, sp.Pow) and not a.exp.is_Integer]
    outer: list[sp.Expr] = []
    for a in sorted(set(found), key=sp.default_sort_key):
        if not any(b != a and b.has(a) for b in found):
            outer.append(a)
    fwd: dict[sp.Expr, sp.Symbol] = {}
    back: dict[sp.Symbol, sp.Expr] = {}
    for k, a in enumerate(outer):
        s = sp.Symbol(f"_a{k}", positive=True) if a.is_positive else sp.Symbol(f"_a{k}", real=True)
        fwd[a], back[s] = s, a
    return e.xreplace(fwd), back


def _has_denominator(e: sp.Expr, x: sp.Symbol | None = None) -> bool:
    for t in sp.Add.make_args(e):
        d = sp.fraction(t)[1]
        if d != 1 and (x is None or x in d.free_symbols):
            return True
    return False


def _sym(ctx: SY.Ctx, params: Mapping[str, Any]) -> sp.Symbol:
    s = ctx.symbol_named(str(params.get("symbol")))
    if s is None:
        raise ValueError(f"no access {params.get('symbol')!r}")
    return s


def _logs_not_positive(e: sp.Expr, combine: bool) -> str | None:
    """A reason naming a log argument factor that is not known positive."""
    for lg in e.atoms(sp.log):
        arg = lg.args[0]
        for f in sp.Mul.make_args(arg):
            base = f.base if isinstance(f, sp.Pow) else f
            if base.is_positive is not True:
                return (f"log({arg}) cannot be {'combined' if combine else 'expanded'}: the factor "
                        f"{base} may be negative or zero (no positivity guarantee)")
    return None


# ============================================================================ strategies
@register
class Factorization(_SympyStrategy):
    name = "factorization"
    shrinks = True
    inverse = "expand_factorization"
    description = ("Factor the value as a polynomial / rational function (sympy.factor): "
                   "x*y + x*z -> x*(y + z), x*x + 2*x*y + y*y -> (x + y)*(x + y).")

    def transform(self, e, ctx, params):
        return sp.factor(e)


@register
class ExpandFactorization(_SympyStrategy):
    name = "expand_factorization"
    inverse = "factorization"
    description = ("Multiply out products of sums in the numerator and denominator separately "
                   "(the inverse of factorization): x*(y + z) -> x*y + x*z.")

    def transform(self, e, ctx, params):
        out = []
        for t in sp.Add.make_args(e):
            n, d = sp.fraction(t)
            out.append(sp.expand(n) / sp.expand(d))
        return sp.Add(*out)


@register
class Cancellation(_SympyStrategy):
    name = "cancellation"
    inverse = "expand_cancellation"
    description = ("Put a rational expression over one denominator and cancel common factors "
                   "(sympy.cancel): (x*x - 1)/(x - 1) -> x + 1.")

    def transform(self, e, ctx, params):
        if not _has_denominator(e):
            raise ValueError("the value has no division to cancel")
        return sp.cancel(e)


@register
class ExpandCancellation(_SympyStrategy):
    name = "expand_cancellation"
    inverse = "cancellation"
    description = ("Distribute a division over the terms of its numerator (sympy.expand): "
                   "(x + y)/z -> x/z + y/z.")

    def transform(self, e, ctx, params):
        if not _has_denominator(e):
            raise ValueError("the value has no division to distribute")
        out = []
        for t in sp.Add.make_args(e):
            n, d = sp.fraction(t)
            out.extend(nt / d for nt in sp.Add.make_args(sp.expand_mul(n)))
        return sp.Add(*out)


@register
class Apart(_SympyStrategy):
    name = "apart"
    inverse = "together"
    needs_symbol = True
    description = ("Partial-fraction decomposition in one access (sympy.apart): "
                   "y/(x*(x + 1)) -> y/x - y/(x + 1). Params: {\"symbol\": access}.")

    def transform(self, e, ctx, params):
        x = _sym(ctx, params)
        if not _has_denominator(sp.together(e), x):
            raise ValueError(f"the value has no denominator in {params.get('symbol')}")
        return sp.apart(e, x)


@register
class Together(_SympyStrategy):
    name = "together"
    inverse = "apart"
    description = "Combine a sum of fractions over a common denominator (sympy.together)."

    def transform(self, e, ctx, params):
        if not _has_denominator(e):
            raise ValueError("the value has no fraction to combine")
        return sp.together(e)


@register
class Powsimp(_SympyStrategy):
    name = "powsimp"
    rational = False
    inverse = "expand_powsimp"
    description = ("Combine powers with the same base or exponent (sympy.powsimp): "
                   "exp(a)*exp(b) -> exp(a + b).")

    def transform(self, e, ctx, params):
        return sp.powsimp(e)


@register
class ExpandPowsimp(_SympyStrategy):
    name = "expand_powsimp"
    rational = False
    splits_exp = True
    inverse = "powsimp"
    description = ("Split powers of sums and of products (sympy.expand_power_exp and "
                   "expand_power_base): exp(a + b) -> exp(a)*exp(b).")

    def transform(self, e, ctx, params):
        return sp.expand_power_base(sp.expand_power_exp(e))


@register
class ExpandLog(_SympyStrategy):
    name = "expand_log"
    rational = False
    inverse = "logsimp"
    description = ("log(a*b) -> log(a) + log(b), log(a**n) -> n*log(a) (sympy.expand_log, "
                   "without force: only for factors the program guarantees positive).")

    def transform(self, e, ctx, params):
        return sp.expand_log(e, force=False)

    def noop_reason(self, e, ctx, params):
        return _logs_not_positive(e, combine=False)


@register
class Logsimp(_SympyStrategy):
    name = "logsimp"
    rational = False
    inverse = "expand_log"
    description = ("log(a) + log(b) -> log(a*b), n*log(a) -> log(a**n) (sympy.logcombine, "
                   "without force: only for arguments the program guarantees positive).")

    def transform(self, e, ctx, params):
        logs = [lg for lg in e.atoms(sp.log) if lg.args[0].has(sp.exp)]
        if len(e.atoms(sp.log)) >= 2 and logs:
            # log(exp(a)/s) - log(exp(b)/t) -> log(exp(a)*t/(s*exp(b))): the combined argument
            # spans the product of the ranges, and overflows (f32: past 3.4e38) where each log is
            # finite (found by the verifier's mixed-sign inputs on rlhf_token_kl)
            raise ValueError(f"combining would multiply exponentials ({logs[0].args[0]}): the "
                             f"product overflows where each log is finite")
        return sp.logcombine(e, force=False)

    def noop_reason(self, e, ctx, params):
        if len(e.atoms(sp.log)) >= 2:
            for lg in e.atoms(sp.log):
                if lg.args[0].is_positive is not True:
                    return (f"log({lg.args[0]}) cannot be combined: its argument may be negative "
                            f"or zero (no positivity guarantee)")
        return None


@register
class Collect(_SympyStrategy):
    name = "collect"
    inverse = "expand_collect"
    needs_symbol = True
    description = ("Collect the terms with a common power of one access (sympy.collect): "
                   "x*y + x*z + w -> x*(y + z) + w. Params: {\"symbol\": access}.")

    def transform(self, e, ctx, params):
        return sp.collect(e, _sym(ctx, params))


@register
class ExpandCollect(_SympyStrategy):
    name = "expand_collect"
    inverse = "collect"
    needs_symbol = True
    description = ("Distribute one access over the sums it multiplies, leaving other terms "
                   "alone: x*(y + z) + w -> x*y + x*z + w. Params: {\"symbol\": access}.")

    def transform(self, e, ctx, params):
        x = _sym(ctx, params)
        out = []
        for t in sp.Add.make_args(e):
            fs = sp.Mul.make_args(t)
            direct = any(f == x or isinstance(f, sp.Pow) and f.base == x for f in fs)
            if direct and any(isinstance(f, sp.Add) for f in fs):
                out.append(sp.expand_mul(t, deep=False))
            else:
                out.append(t)
        return sp.Add(*out)


__all__ = ["Factorization", "ExpandFactorization", "Cancellation", "ExpandCancellation", "Apart",
           "Together", "Powsimp", "ExpandPowsimp", "ExpandLog", "Logsimp", "Collect",
           "ExpandCollect"]
