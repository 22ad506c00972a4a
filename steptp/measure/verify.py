"""Numerical verification: does a candidate kernel compute what a reference computes?

Both are built with TVM for the same target and run on the same seeded random inputs; their
outputs are compared element by element with ONE criterion,

    |candidate - reference| <= atol' + rtol * |reference|

where (atol, rtol) come from ``TOLERANCES[exactness][dtype]`` and ``atol' = atol`` for the
``exact`` class. For ``reassociation`` and ``algebraic``, ``atol' = max(atol, rtol * scale)`` with
``scale`` the largest finite magnitude of that output in the reference: reordering a sum of n terms
moves every element by about eps * n * (size of the terms), whatever the element's own size, so an
element that cancels to near zero (a dot product of mixed-sign inputs) would otherwise fail an
elementwise relative test although the kernel is right. A real bug (a term dropped, an index
off by one) still moves elements by about the terms' size, far above ``rtol * scale``. Special values: an element that is
NaN in the reference must be NaN in the candidate and vice versa; an infinity must be matched
exactly (same sign). Integer and boolean outputs must be equal whatever the class.

Outputs are pre-filled with NaN (integers: a sentinel), so an element the candidate never writes
fails; when a candidate element is NaN (or the sentinel) where the reference has a value, the
candidate is run once more with a different fill to tell "never written" from "computed NaN".

Exactness classes:

* ``exact`` -- pure loop and layout changes (split, reorder, fuse, parallelize, cache...): the
  same operations on the same values, so only code-generation noise (FMA contraction, vector vs
  scalar math) is tolerated;
* ``reassociation`` -- reductions evaluated in another order (rfactor, split reductions, tree
  sums): rounding differences that grow with the reduction length;
* ``algebraic`` -- the math is rewritten (exp(a-b) = exp(a)/exp(b), x/y = x*(1/y), fast
  approximations): larger, but still bounded, differences.
"""

from __future__ import annotations

from typing import Any, Collection, Sequence

import numpy as np
from pydantic import BaseModel, Field

from ..leir import ast as A
from ..tir import build as B

# THE tolerance table: exactness class -> LEIR float dtype -> (atol, rtol).
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "exact": {
        "f16": (1e-3, 1e-3),
        "bf16": (1e-2, 1e-2),
        "f32": (1e-6, 1e-5),
        "f64": (1e-12, 1e-11),
    },
    "reassociation": {
        "f16": (2e-2, 1e-2),
        "bf16": (1e-1, 5e-2),
        "f32": (1e-4, 1e-4),
        "f64": (1e-10, 1e-9),
    },
    "algebraic": {
        "f16": (5e-2, 5e-2),
        "bf16": (2e-1, 1e-1),
        "f32": (1e-3, 1e-3),
        "f64": (1e-8, 1e-7),
    },
}
EXACTNESS = tuple(TOLERANCES)
#: Bumped whenever the comparison rule changes, so cached verdicts of the old rule are not reused
#: (2: the absolute tolerance of the non-exact classes scales with the output's magnitude).
RULE_VERSION = 2

# Standard deviation of the float inputs for each seed (seed % len): mixed signs, several scales.
SEED_SCALES = (1.0, 3.0, 0.3)

# Intrinsics whose argument should be positive: inputs read inside them are drawn positive.
_POSITIVE_FUNCS = frozenset({"log", "log2", "log1p", "sqrt", "rsqrt", "pow"})


def tolerance(exactness: str, dtype: str) -> tuple[float, float]:
    """(atol, rtol) for an output of ``dtype`` (LEIR or TVM name); (0, 0) for integers."""
    if exactness not in TOLERANCES:
        raise ValueError(f"unknown exactness {exactness!r}; use one of {', '.join(EXACTNESS)}")
    short = A.DTYPE_FROM_TVM.get(dtype, dtype)
    return TOLERANCES[exactness].get(short, (0.0, 0.0))


class SeedResult(BaseModel):
    seed: int
    passed: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    reason: str | None = None


class VerifyResult(BaseModel):
    """The verdict; ``reason`` says why it failed (the first failure found)."""

    passed: bool
    exactness: str
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    seeds: list[SeedResult] = Field(default_factory=list)
    reason: str | None = None
    target: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


# ---------------------------------------------------------------------------- inputs
def _positive_inputs(program: A.Program) -> set[str]:
    """Inputs read inside log/sqrt/rsqrt/pow arguments or as the base of ``**``."""
    names = {t.name for t in program.inputs}
    out: set[str] = set()
    for s in program.body:
        for n in A.walk(s):
            arg = None
            if isinstance(n, A.Call) and n.func in _POSITIVE_FUNCS:
                arg = n.args[0]
            elif isinstance(n, A.Binary) and n.op == "**":
                arg = n.lhs
            if arg is not None:
                out |= {ld.tensor for ld in A.loads(arg) if ld.tensor in names}
    return out


def _index_ranges(program: A.Program) -> dict[str, int]:
    """Integer inputs read inside a subscript (gathers) -> exclusive upper bound for values."""
    names = {t.name for t in program.inputs if t.dtype in A.INT_DTYPES}
    tensors = program.tensors
    out: dict[str, int] = {}
    for s in program.body:
        for n in A.walk(s):
            subs = ()
            if isinstance(n, (A.Load, A.Assign)):
                subs = tuple(zip(tensors[n.tensor].shape, n.index)) if n.tensor in tensors else ()
            for dim, sub in subs:
                for ld in A.loads(sub):
                    if ld.tensor in names:
                        out[ld.tensor] = min(out.get(ld.tensor, dim), dim)
    return out


def _params_of(kernel) -> tuple[B.Param, ...]:
    if isinstance(kernel, A.Program):
        return B.program_signature(kernel)
    if isinstance(kernel, B.Built):
        return kernel.params
    if isinstance(kernel, (tuple, list)):
        return tuple(kernel)
    return B.signature(kernel)


def random_inputs(kernel, seed: int = 0, positive: Collection[str] | str = "auto",
                  index_bounds: dict[str, int] | None = None) -> list[np.ndarray]:
    """Seeded random inputs for a LEIR program, a PrimFunc, a ``Built`` or a signature.

    Floats: normal with standard deviation ``SEED_SCALES[seed % 3]`` (mixed signs); tensors in
    ``positive`` (``"auto"``: those read under log/sqrt/rsqrt/pow or as a ``**`` base) get
    ``|x| + 0.1*scale``. Integers: small values in [-4, 4] ([0, 8] unsigned), or in
    ``[0, bound)`` for tensors used as subscripts (gathers; found automatically for programs).
    Booleans: fair coin flips.
    """
    params = [p for p in _params_of(kernel) if not p.is_output]
    prog = kernel if isinstance(kernel, A.Program) else None
    if positive == "auto":
        positive = _positive_inputs(prog) if prog is not None else set()
    bounds = dict(_index_ranges(prog)) if prog is not None else {}
    bounds.update(index_bounds or {})
    rng = np.random.default_rng(seed)
    scale = SEED_SCALES[seed % len(SEED_SCALES)]
    out = []
    for p in params:
        dt = B.np_dtype(p.dtype)
        if B.is_float_dtype(p.dtype):
            x = rng.normal(0.0, scale, p.shape)
            if p.name in positive:
                x = np.abs(x) + 0.1 * scale
            out.append(np.asarray(x).astype(dt))
        elif p.dtype == "bool":
            out.append(np.asarray(rng.random(p.shape) < 0.5))
        else:
            if p.name in bounds:
                lo, hi = 0, max(bounds[p.name], 1)
            elif np.iinfo(dt).min == 0:
                lo, hi = 0, 9
            else:
                lo, hi = -4, 5
            out.append(np.asarray(rng.integers(lo, hi, p.shape)).astype(dt))
    return out


# ---------------------------------------------------------------------------- comparison
def _alt_fill(dtype: str):
    if B.is_float_dtype(dtype):
        return 1234.5
    if dtype == "bool":
        return True
    return 7


def _as_program(x) -> A.Program | None:
    if isinstance(x, A.Program):
        return x
    if isinstance(x, str):
        from ..leir import parse

        return parse(x)
    return None


def _signature_problem(cand: Sequence[B.Param], ref: Sequence[B.Param]) -> str | None:
    def fmt(ps):
        return ", ".join(f"{'->' if p.is_output else ''}{p.name}: {p.dtype}{list(p.shape)}"
                         for p in ps)

    if len(cand) != len(ref):
        return (f"signature mismatch: candidate has {len(cand)} parameters ({fmt(cand)}), "
                f"reference {len(ref)} ({fmt(ref)})")
    for i, (c, r) in enumerate(zip(cand, ref)):
        if c.shape != r.shape or c.dtype != r.dtype or c.is_output != r.is_output:
            return (f"signature mismatch at parameter {i}: candidate {c.name} "
                    f"{'output' if c.is_output else 'input'} {c.dtype}{list(c.shape)}, reference "
                    f"{r.name} {'output' if r.is_output else 'input'} {r.dtype}{list(r.shape)}")
    return None


def compare(got: np.ndarray, want: np.ndarray, dtype: str, exactness: str,
            unwritten: np.ndarray | None = None, name: str = "out"
            ) -> tuple[bool, float, float, str | None]:
    """Compare one output. Returns (passed, max_abs_err, max_rel_err, reason)."""
    atol, rtol = tolerance(exactness, dtype)
    size = want.size
    if not B.is_float_dtype(dtype):
        g, w = got.astype(np.int64 if dtype != "bool" else bool), want.astype(
            np.int64 if dtype != "bool" else bool)
        bad = g != w
        if unwritten is not None and (unwritten & bad).any():
            n = int((unwritten & bad).sum())
            return False, float("inf"), float("inf"), \
                f"output {name}: {n} of {size} elements not written (sentinel)"
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        abs_err = float(diff.max()) if diff.size else 0.0
        nz = w != 0
        rel = float((diff[nz] / np.abs(w[nz].astype(np.float64))).max()) if nz.any() else 0.0
        if bad.any():
            i = tuple(int(k) for k in np.argwhere(bad)[0])
            return False, abs_err, rel, (f"output {name}: {int(bad.sum())} of {size} elements "
                                         f"differ (integers must be equal); first at {i}: "
                                         f"{got[i]} vs {want[i]}")
        return True, abs_err, rel, None
    with np.errstate(invalid="ignore", over="ignore"):
        return _compare_float(got, want, dtype, exactness, unwritten, name, atol, rtol)


def _compare_float(got, want, dtype, exactness, unwritten, name, atol, rtol):
    size = want.size
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    if unwritten is not None and (unwritten & ~wn).any():
        n = int((unwritten & ~wn).sum())
        return False, float("inf"), float("inf"), \
            f"output {name}: {n} of {size} elements not written (NaN)"
    nan_bad = gn != wn
    ginf, winf = np.isinf(g), np.isinf(w)
    inf_bad = (ginf | winf) & ~(gn | wn) & (g != w)
    finite = ~(gn | wn | ginf | winf)
    diff = np.where(finite, np.abs(g - w), 0.0)
    abs_err = float(diff.max()) if diff.size else 0.0
    nz = finite & (w != 0)
    rel = float((diff[nz] / np.abs(w[nz])).max()) if nz.any() else 0.0
    if exactness != "exact" and finite.any():
        atol = max(atol, rtol * float(np.abs(w[finite]).max()))
    tol_bad = finite & (diff > atol + rtol * np.abs(w))
    if nan_bad.any():
        n1, n2 = int((gn & ~wn).sum()), int((wn & ~gn).sum())
        parts = []
        if n1:
            parts.append(f"{n1} elements NaN where the reference is not")
        if n2:
            parts.append(f"{n2} elements not NaN where the reference is NaN")
        return False, float("inf"), float("inf"), f"output {name}: " + "; ".join(parts)
    if inf_bad.any():
        i = tuple(int(k) for k in np.argwhere(inf_bad)[0])
        return False, float("inf"), float("inf"), (
            f"output {name}: {int(inf_bad.sum())} elements differ in an infinity; first at {i}: "
            f"{got[i]} vs {want[i]}")
    if tol_bad.any():
        i = tuple(int(k) for k in np.argwhere(tol_bad)[0])
        j = np.unravel_index(int(np.argmax(diff)), diff.shape)
        return False, abs_err, rel, (
            f"output {name}: {int(tol_bad.sum())} of {size} elements differ beyond atol={atol:g}, "
            f"rtol={rtol:g} ({exactness}, {dtype}); max abs err {abs_err:.3g} at "
            f"{tuple(int(k) for k in j)} ({got[j]} vs {want[j]}); first at {i}")
    return True, abs_err, rel, None


def compare_outputs(outs, got, want, exactness: str, rerun_alt):
    """Compare each candidate output with the reference's: one ``compare`` result per output.

    An element that still holds the pre-fill (NaN, or the integer sentinel) is checked against a
    second run pre-filled with another value (``rerun_alt()``, called at most once): if it holds
    that one too, the candidate never wrote it."""
    from ..tir import build as B

    got2 = None
    results = []
    for k, (p, g, w) in enumerate(zip(outs, got, want)):
        sentinel = B.fill_value(p.dtype)
        suspicious = np.isnan(g.astype(np.float64)) if B.is_float_dtype(p.dtype) \
            else (g == sentinel) & (w != sentinel)
        unwritten = None
        if suspicious.any():
            if got2 is None:
                got2 = rerun_alt()
            unwritten = suspicious & (got2[k] == np.asarray(_alt_fill(p.dtype), dtype=g.dtype))
        results.append(compare(g, w, p.dtype, exactness, unwritten, name=p.name))
    return results


def verify(candidate, reference, exactness: str = "exact", target=None,
           seeds: Sequence[int] = (0, 1, 2), positive: Collection[str] | str = "auto",
           inputs: Sequence[Sequence[np.ndarray]] | None = None) -> VerifyResult:
    """Build ``candidate`` (a LEIR program or text) and ``reference`` (a LEIR program or text, or
    a PrimFunc) for ``target`` (default: the host CPU), run both on the inputs of each seed and
    compare every output with the tolerance of ``exactness``. ``inputs`` (one list per run)
    replaces the seeded inputs when given.
    """
    tolerance(exactness, "f32")  # validates the class name
    target = target or B.default_target()
    res = VerifyResult(passed=False, exactness=exactness, target=target.key)
    cand_prog = _as_program(candidate)
    ref_prog = _as_program(reference)
    cand_kernel = cand_prog if cand_prog is not None else candidate
    ref_kernel = ref_prog if ref_prog is not None else reference
    try:
        cand_sig = _params_of(cand_kernel)
        ref_sig = _params_of(ref_kernel)
    except Exception as e:  # noqa: BLE001
        res.reason = f"signature: {type(e).__name__}: {e}"
        return res
    problem = _signature_problem(cand_sig, ref_sig)
    if problem:
        res.reason = problem
        return res
    built = {}
    for role, k in (("candidate", cand_kernel), ("reference", ref_kernel)):
        try:
            built[role] = k if isinstance(k, B.Built) else B.build(k, target)
        except Exception as e:  # noqa: BLE001 - report any lowering or build failure
            res.reason = f"{role} does not build: {type(e).__name__}: {e}"
            return res
    cb, rb = built["candidate"], built["reference"]
    gen_from = cand_prog if cand_prog is not None else ref_prog if ref_prog is not None else rb
    runs = list(inputs) if inputs is not None else \
        [random_inputs(gen_from, s, positive=positive) for s in seeds]
    labels = list(seeds) if inputs is None else list(range(len(runs)))
    outs = [p for p in cb.params if p.is_output]
    all_ok = True
    for label, ins in zip(labels, runs):
        sr = SeedResult(seed=int(label), passed=True)
        try:
            want = B.run(rb, ins)
            got = B.run(cb, ins)
        except Exception as e:  # noqa: BLE001
            sr.passed, sr.reason = False, f"run failed: {type(e).__name__}: {e}"
            res.seeds.append(sr)
            all_ok = False
            continue
        for ok, ae, re_, why in compare_outputs(outs, got, want, exactness,
                                                lambda: B.run(cb, ins, fill=_alt_fill)):
            sr.max_abs_err = max(sr.max_abs_err, ae)
            sr.max_rel_err = max(sr.max_rel_err, re_)
            if not ok and sr.passed:
                sr.passed, sr.reason = False, why
        res.seeds.append(sr)
        all_ok &= sr.passed
        res.max_abs_err = max(res.max_abs_err, sr.max_abs_err)
        res.max_rel_err = max(res.max_rel_err, sr.max_rel_err)
    res.passed = all_ok and bool(runs)
    if not res.passed:
        first = next((s for s in res.seeds if not s.passed), None)
        res.reason = (f"seed {first.seed}: {first.reason}" if first is not None
                      else "no inputs to verify on")
    return res
