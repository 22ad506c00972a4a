"""Numerical verification: does a candidate kernel compute what a reference computes?

Both are built with TVM for the same target and run on the same seeded random inputs; their
outputs are compared element by element with ONE criterion, for every exactness class:

    |candidate - reference| <= atol + rtol * |reference| + 2 * err

``(atol, rtol)`` come from ``TOLERANCES[exactness][dtype]`` (this table is the one place they are
written) and never grow with the output's range: a wrong element is wrong whatever the size of
its neighbours (a softmax over 16,384 columns has values near 6e-5; a rule that scales atol with
``max |reference|`` passes a rewrite that zeroes them). ``err`` is a per-element bound of the
rounding error of the reference's own evaluation, computed by a float64 twin of the reference
program (``steptp.measure.error_bound``): it grows with the reduction length, the dtype's unit
roundoff and the magnitudes that element was computed from, so a 512-term dot product of
mixed-sign inputs that cancels to near zero gets the slack its rounding needs and nothing more.
The classes differ in how a reduction may be evaluated (``R`` in ``error_bound``): in the same
order for ``exact``, in any order for ``reassociation`` and ``algebraic``. ``err`` is only
computed when the fixed tolerances fail somewhere (most candidates pass without it), and is 0
when neither program is LEIR or the twin cannot be built (stricter, never looser).

Special values: a candidate element that is NaN or infinite where the reference is finite
fails. For ``exact`` an infinity must be matched (same sign), and an element that is NaN in the
reference is undetermined (a 0/0 of catastrophic cancellation flips with any rounding). For the
other classes an element whose reference is NaN or infinite is undetermined (the reference overflowed or cancelled to nothing; a rewrite may compute
the value it should have had), and a candidate fails when no element of any output was
determined on any input. Integer and boolean outputs must be equal whatever the class.

Outputs are pre-filled with NaN (integers: a sentinel), so an element the candidate never writes
fails; when a candidate element is NaN (or the sentinel) where the reference has a value, the
candidate is run once more with a different fill to tell "never written" from "computed NaN".
Both programs are run on fresh copies of the inputs, and a candidate that writes to an input
fails (the caller's data is not the candidate's scratch space).

Inputs: one distribution per seed (``DISTRIBUTIONS[seed % 5]``: standard normal, uniform
positive, large magnitude, small magnitude, mixed signs over four decades), so rewrites of
softmax, log, exp and division meet values that exercise them; the default is five seeds, one of
each. Tensors read under log/sqrt/rsqrt/pow are drawn positive.

Exactness classes:

* ``exact`` -- pure loop and layout changes (split, reorder, fuse, parallelize, cache...): the
  same operations on the same values, so only code-generation noise (FMA contraction, vector vs
  scalar math) is tolerated;
* ``reassociation`` -- reductions evaluated in another order (rfactor, split reductions, tree
  sums): rounding differences that grow with the reduction length (the error bound);
* ``algebraic`` -- the math is rewritten (exp(a-b) = exp(a)/exp(b), x/y = x*(1/y), fast
  approximations): a larger relative tolerance on top of the error bound.
"""

from __future__ import annotations

import os

import time
from contextlib import contextmanager
from typing import Any, Collection, Iterator, Sequence

import numpy as np
from pydantic import BaseModel, Field

from ..exactness import EXACTNESS
from ..leir import ast as A
from ..leir.races import parallel_races
from ..tir import build as B

# THE tolerance table: exactness class -> LEIR float dtype -> (atol, rtol). atol is for elements
# whose reference is (near) zero and is far below any value a kernel computes on purpose;
# rounding beyond it is the error bound's job, not atol's.
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "exact": {
        "f16": (1e-5, 1e-3),
        "bf16": (1e-5, 1e-2),
        "f32": (1e-6, 1e-5),
        "f64": (1e-12, 1e-11),
    },
    "reassociation": {
        "f16": (1e-5, 2e-3),
        "bf16": (1e-5, 1e-2),
        "f32": (1e-6, 1e-5),
        "f64": (1e-12, 1e-11),
    },
    "algebraic": {
        "f16": (1e-5, 5e-3),
        "bf16": (1e-5, 2e-2),
        "f32": (1e-6, 1e-4),
        "f64": (1e-12, 1e-9),
    },
}
#: How many reference error bounds a candidate may be off (the reference's own rounding plus the
#: candidate's, each within one bound).
ERROR_BOUND_FACTOR = 2.0
#: An algebraic rewrite changes how rounding errors propagate (partial fractions cancel where the
#: combined fraction did not), so its own error bound counts too, but at most this many times the
#: rest of the allowance: a candidate cannot buy unlimited slack by adding and subtracting 1e10.
CANDIDATE_BOUND_CAP = 10.0
#: Bumped whenever the comparison rule changes, so cached verdicts of the old rule are not reused
#: (2: the absolute tolerance of the non-exact classes scaled with the output's magnitude;
#: 3: fixed per-element tolerances + the reference's error bound, five input distributions,
#: inputs must stay unchanged; 4: a reference NaN is undetermined in every class; 5: races
#: decided at any size, parallel candidates also run with several threads).
RULE_VERSION = 5

#: Input distributions, one per seed (``seed % len``): (name, how float inputs are drawn).
DISTRIBUTIONS = ("standard normal", "uniform positive", "large magnitude", "small magnitude",
                 "mixed signs")
DEFAULT_SEEDS = (0, 1, 2, 3, 4)

#: Thread counts a CPU candidate with a ``parallel`` loop is run with once more, on the first
#: input set, after it passed: a race the static check (``leir.races``) would miss, or a TVMScript
#: candidate it cannot read, shows as wrong elements. Runs other than these use the thread count
#: the caller set (one in the measurement workers). Counts above the size of TVM's thread pool
#: (``TVM_NUM_THREADS`` when it started) are run at that size; none when it is 1.
RACE_THREADS = (2, 4)
#: Runs per thread count: a race loses updates only in some runs.
RACE_REPEATS = 2

# Intrinsics whose argument should be positive: inputs read inside them are drawn positive.
_POSITIVE_FUNCS = frozenset({"log", "log2", "log1p", "sqrt", "rsqrt", "pow"})


def _draw_floats(rng: np.random.Generator, seed: int, shape) -> np.ndarray:
    kind = DISTRIBUTIONS[seed % len(DISTRIBUTIONS)]
    if kind == "standard normal":
        return rng.normal(0.0, 1.0, shape)
    if kind == "uniform positive":
        return rng.uniform(0.05, 2.0, shape)
    if kind == "large magnitude":
        return rng.normal(0.0, 8.0, shape)
    if kind == "small magnitude":
        return rng.normal(0.0, 1e-3, shape)
    # mixed signs: magnitudes spread log-uniformly over [1e-2, 1e2]; the sign is drawn per
    # index of the first axis (per element for vectors), so some rows are all negative (a max
    # started from 0 instead of -inf shows there) and others all positive
    shape = tuple(shape)
    mag = 10.0 ** rng.uniform(-2.0, 2.0, shape)
    if len(shape) >= 2:
        sign = np.where(rng.random(shape[:1] + (1,) * (len(shape) - 1)) < 0.5, -1.0, 1.0)
    else:
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return sign * mag


def tolerance(exactness: str, dtype: str) -> tuple[float, float]:
    """(atol, rtol) for an output of ``dtype`` (LEIR or TVM name); (0, 0) for integers."""
    if exactness not in TOLERANCES:
        raise ValueError(f"unknown exactness {exactness!r}; use one of {', '.join(EXACTNESS)}")
    short = A.DTYPE_FROM_TVM.get(dtype, dtype)
    return TOLERANCES[exactness].get(short, (0.0, 0.0))


class SeedResult(BaseModel):
    seed: int
    passed: bool
    undetermined: int = 0     # reference elements NaN/inf, not compared (non-exact classes)
    compared: int = 0
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

    Floats: drawn from ``DISTRIBUTIONS[seed % 5]``; tensors in ``positive`` (``"auto"``: those
    read under log/sqrt/rsqrt/pow or as a ``**`` base) get their absolute value plus a small
    offset. Integers: small values in [-4, 4] ([0, 8] unsigned), or in ``[0, bound)`` for
    tensors used as subscripts (gathers; found automatically for programs). Booleans: coin
    flips whose bias changes with the seed.
    """
    params = [p for p in _params_of(kernel) if not p.is_output]
    prog = kernel if isinstance(kernel, A.Program) else None
    if positive == "auto":
        positive = _positive_inputs(prog) if prog is not None else set()
    bounds = dict(_index_ranges(prog)) if prog is not None else {}
    bounds.update(index_bounds or {})
    rng = np.random.default_rng(seed)
    out = []
    for p in params:
        dt = B.np_dtype(p.dtype)
        if B.is_float_dtype(p.dtype):
            x = _draw_floats(rng, seed, p.shape)
            if p.name in positive:
                x = np.abs(x) + 0.1 * max(float(np.std(x)) if np.size(x) else 1.0, 1e-3)
            out.append(np.asarray(x).astype(dt))
        elif p.dtype == "bool":
            out.append(np.asarray(rng.random(p.shape) < (0.5, 0.2, 0.8)[seed % 3]))
        else:
            if p.name in bounds:
                lo, hi = 0, max(bounds[p.name], 1)
            elif np.iinfo(dt).min == 0:
                lo, hi = 0, 9
            else:
                lo, hi = -4, 5
            out.append(np.asarray(rng.integers(lo, hi, p.shape)).astype(dt))
    return out


def inputs_key(kernel, seed: int = 0) -> tuple:
    """Everything ``random_inputs(kernel, seed)`` (defaults otherwise) depends on: equal keys,
    equal inputs."""
    params = tuple((p.name, str(p.dtype), tuple(p.shape)) for p in _params_of(kernel)
                   if not p.is_output)
    prog = kernel if isinstance(kernel, A.Program) else None
    if prog is None:
        return params, (), (), int(seed)
    return (params, tuple(sorted(_positive_inputs(prog))),
            tuple(sorted(_index_ranges(prog).items())), int(seed))


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
        if r.is_output and not c.is_output and c.shape == r.shape and c.dtype == r.dtype:
            return f"output {c.name} is never written by the candidate (parameter {i})"
        if c.is_output and not r.is_output and c.shape == r.shape and c.dtype == r.dtype:
            return f"the candidate writes to its input {c.name} (parameter {i})"
        if c.shape != r.shape or c.dtype != r.dtype or c.is_output != r.is_output:
            return (f"signature mismatch at parameter {i}: candidate {c.name} "
                    f"{'output' if c.is_output else 'input'} {c.dtype}{list(c.shape)}, reference "
                    f"{r.name} {'output' if r.is_output else 'input'} {r.dtype}{list(r.shape)}")
    return None


def _stale(want: np.ndarray, dtype: str) -> np.ndarray:
    """What an output buffer might hold from an earlier call: the reference's answer, moved off
    it (so a kernel cannot tell it from a real stale result by a constant)."""
    if B.is_float_dtype(dtype):
        w = np.nan_to_num(want.astype(np.float64), nan=1.0, posinf=1.0, neginf=-1.0)
        return (w * 1.5 + 1.0).astype(want.dtype)
    if dtype == "bool":
        return ~want.astype(bool)
    return (want.astype(np.int64) + 1).astype(want.dtype)


def _fmt_index(name: str, i: tuple[int, ...]) -> str:
    return f"{name}[{', '.join(str(k) for k in i)}]" if i else name


def compare(got: np.ndarray, want: np.ndarray, dtype: str, exactness: str,
            unwritten: np.ndarray | None = None, name: str = "out",
            bound: np.ndarray | None = None, cand_bound: np.ndarray | None = None
            ) -> tuple[bool, float, float, str | None]:
    """Compare one output. ``bound``: the reference's per-element rounding-error bound
    (``error_bound``), or None for the fixed tolerances alone; ``cand_bound`` (algebraic class
    only): the candidate's own, counted up to ``CANDIDATE_BOUND_CAP`` times the rest. Returns (passed, max_abs_err,
    max_rel_err, reason); the reason names the output and its first wrong element."""
    atol, rtol = tolerance(exactness, dtype)
    size = want.size
    if not B.is_float_dtype(dtype):
        g, w = got.astype(np.int64 if dtype != "bool" else bool), want.astype(
            np.int64 if dtype != "bool" else bool)
        bad = g != w
        if unwritten is not None and (unwritten & bad).any():
            n = int((unwritten & bad).sum())
            i = tuple(int(k) for k in np.argwhere(unwritten & bad)[0])
            return False, float("inf"), float("inf"), \
                f"output {name}: {n} of {size} elements not written (sentinel); first {_fmt_index(name, i)}"
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        abs_err = float(diff.max()) if diff.size else 0.0
        nz = w != 0
        rel = float((diff[nz] / np.abs(w[nz].astype(np.float64))).max()) if nz.any() else 0.0
        if bad.any():
            i = tuple(int(k) for k in np.argwhere(bad)[0])
            return False, abs_err, rel, (f"output {name}: {int(bad.sum())} of {size} elements "
                                         f"differ (integers must be equal); first wrong element "
                                         f"{_fmt_index(name, i)}: got {got[i]}, want {want[i]}")
        return True, abs_err, rel, None
    with np.errstate(invalid="ignore", over="ignore"):
        return _compare_float(got, want, dtype, exactness, unwritten, name, atol, rtol, bound,
                              cand_bound)


def _compare_float(got, want, dtype, exactness, unwritten, name, atol, rtol, bound, cand_bound):
    size = want.size
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    if unwritten is not None and (unwritten & ~wn).any():
        n = int((unwritten & ~wn).sum())
        i = tuple(int(k) for k in np.argwhere(unwritten & ~wn)[0])
        return False, float("inf"), float("inf"), \
            f"output {name}: {n} of {size} elements not written (NaN); first {_fmt_index(name, i)}"
    ginf, winf = np.isinf(g), np.isinf(w)
    # where the reference itself overflowed or lost all digits (inf, NaN), a rewrite of another
    # order or another algebra may compute the value it should have had: those elements are
    # undetermined for the non-exact classes. For exact ones an infinity must match (the same
    # operations overflow alike), a NaN need not: a 0/0 of catastrophic cancellation flips with
    # any rounding (compute_inline keeping an intermediate in a register, under FMA contraction,
    # gave a finite value where the reference's 1 - 1 was 0: found by the coverage benchmark)
    undetermined = (wn | winf) if exactness != "exact" else wn
    nan_bad = (gn != wn) & ~undetermined
    inf_bad = (ginf | winf) & ~(gn | wn) & (g != w) & ~undetermined
    finite = ~(gn | wn | ginf | winf)
    diff = np.where(finite, np.abs(g - w), 0.0)
    abs_err = float(diff.max()) if diff.size else 0.0
    nz = finite & (w != 0)
    rel = float((diff[nz] / np.abs(w[nz])).max()) if nz.any() else 0.0
    allowed = atol + rtol * np.abs(w)
    if bound is not None:
        allowed = allowed + ERROR_BOUND_FACTOR * np.where(np.isfinite(bound), bound, 0.0)
    if cand_bound is not None and exactness == "algebraic":
        allowed = allowed + np.minimum(np.where(np.isfinite(cand_bound), cand_bound, 0.0),
                                       CANDIDATE_BOUND_CAP * allowed)
    tol_bad = finite & (diff > allowed)
    if nan_bad.any():
        n1, n2 = int((gn & ~wn).sum()), int((wn & ~gn).sum())
        i = tuple(int(k) for k in np.argwhere(nan_bad)[0])
        parts = []
        if n1:
            parts.append(f"{n1} elements NaN where the reference is not")
        if n2:
            parts.append(f"{n2} elements not NaN where the reference is NaN")
        return False, float("inf"), float("inf"), (
            f"output {name}: " + "; ".join(parts) +
            f"; first wrong element {_fmt_index(name, i)}: got {got[i]}, want {want[i]}")
    if inf_bad.any():
        i = tuple(int(k) for k in np.argwhere(inf_bad)[0])
        return False, float("inf"), float("inf"), (
            f"output {name}: {int(inf_bad.sum())} elements differ in an infinity; first wrong "
            f"element {_fmt_index(name, i)}: got {got[i]}, want {want[i]}")
    if tol_bad.any():
        i = tuple(int(k) for k in np.argwhere(tol_bad)[0])
        j = tuple(int(k) for k in np.unravel_index(int(np.argmax(diff)), diff.shape))
        rule = f"atol={atol:g} + rtol={rtol:g}*|want|" + (
            f" + {ERROR_BOUND_FACTOR:g}*error bound" if bound is not None else "") + (
            f" + the candidate's own bound (at most {CANDIDATE_BOUND_CAP:g}x the rest)"
            if cand_bound is not None and exactness == "algebraic" else "")
        return False, abs_err, rel, (
            f"output {name}: {int(tol_bad.sum())} of {size} elements differ beyond {rule} "
            f"({exactness}, {dtype}); first wrong element {_fmt_index(name, i)}: got {got[i]:.6g}, "
            f"want {want[i]:.6g} (|diff| {diff[i]:.3g} > allowed {allowed[i]:.3g}); largest "
            f"difference {abs_err:.3g} at {_fmt_index(name, j)}")
    return True, abs_err, rel, None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def compare_outputs(outs, got, want, exactness: str, rerun_alt, bounds=None, cand_bounds=None):
    """Compare each candidate output with the reference's: one ``compare`` result per output.

    An element that still holds the pre-fill (NaN, or the integer sentinel) is checked against a
    second run pre-filled with another value (``rerun_alt()``, called at most once): if it holds
    that one too, the candidate never wrote it. ``bounds()`` (called at most once, only when the
    fixed tolerances fail somewhere) gives the reference's error bound of each output, or None;
    ``cand_bounds()`` the candidate's (algebraic class)."""
    got2 = None
    cache: dict[str, object] = {}

    def bound_of(k: int, which: str = "b", fn=bounds):
        if fn is None:
            return None
        if which not in cache:
            cache[which] = fn()
        b = cache[which]
        return None if b is None else b[k]

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
        r = compare(g, w, p.dtype, exactness, unwritten, name=p.name)
        never_written = unwritten is not None and bool(unwritten.any())
        if not r[0] and not never_written and r[1] != float("inf") and bounds is not None:
            b = bound_of(k)
            if b is not None:
                r = compare(g, w, p.dtype, exactness, None, name=p.name, bound=b)
            if not r[0] and exactness == "algebraic" and cand_bounds is not None:
                cb_ = bound_of(k, "c", cand_bounds)
                if cb_ is not None:
                    r = compare(g, w, p.dtype, exactness, None, name=p.name, bound=b,
                                cand_bound=cb_)
        results.append(r)
    return results


def static_problem(cand_sig, ref_sig, cand_prog: A.Program | None, target) -> str | None:
    """What is wrong with a candidate before it runs: a signature other than the reference's, or
    (a LEIR candidate on a CPU) a racing parallel loop; None when nothing is."""
    problem = _signature_problem(cand_sig, ref_sig)
    if problem is None and cand_prog is not None and not target.is_gpu:
        races = parallel_races(cand_prog)
        problem = f"race: {races[0]}" if races else None
    return problem


def _reference_program(ref_prog, cand_prog):
    """The LEIR program whose error bound is the slack: the reference's, else the candidate's
    (an extracted kernel checked against TVM's own PrimFunc)."""
    return ref_prog if ref_prog is not None else cand_prog


@contextmanager
def tvm_threads(n: int) -> Iterator[int]:
    """Run TVM's parallel loops on ``n`` threads inside the block (as many as its pool allows:
    the number is yielded), then go back to the count before."""
    import tvm_ffi

    config = tvm_ffi.get_global_func("runtime.config_threadpool")
    count = tvm_ffi.get_global_func("runtime.NumThreads")
    before = int(count())
    config(1, int(n))
    try:
        yield int(count())
    finally:
        config(1, before)


def _has_parallel_loop(cb) -> bool:
    from tvm import tirx

    return any(isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL
               for s in B._walk_stmts(cb.func.body))


def threaded_problem(cb, ref_run, exactness: str, bounds=None) -> str | None:
    """Run ``cb`` (a CPU build with a parallel loop) on ``ref_run = (label, inputs, reference
    outputs)`` with each of ``RACE_THREADS``; the reason of the first wrong run, else None."""
    if os.environ.get("STEPTP_IN_WORKER") != "1":
        # TVM's thread pool is process-wide: resizing it in a long-lived process (a search's
        # in-process evaluator, a test run) changes every later parallel timing there. The
        # measurement workers, one process per job set, run these; the static check decides
        # at any size everywhere.
        return None
    _label, ins, want = ref_run
    outs = [p for p in cb.params if p.is_output]
    tried = set()
    for n in RACE_THREADS:
        with tvm_threads(n) as got_n:
            if got_n < 2 or got_n in tried:
                continue
            tried.add(got_n)
            for _ in range(RACE_REPEATS):
                got = B.run(cb, ins)
                for ok, _ae, _re, why in compare_outputs(
                        outs, got, want, exactness, lambda: B.run(cb, ins, fill=_alt_fill),
                        bounds):
                    if not ok:
                        return (f"race: run with {got_n} threads, {why} (the same inputs pass "
                                f"on one thread)")
    return None


def judge(cb, refs, exactness: str, bound_prog: A.Program | None, target,
          stop_at_first: bool = False, cand_prog: A.Program | None = None,
          run_seconds: list[float] | None = None) -> list[SeedResult]:
    """Run the built candidate ``cb`` on each ``(label, inputs, reference outputs)`` of
    ``refs`` and judge it (comparison, inputs unchanged, outputs independent of their buffers'
    previous contents). ``bound_prog``: the LEIR program whose error bound is the slack.
    ``run_seconds``: gets the wall seconds of each run on the reference's inputs (buffer
    copies included: a bound on one call, which spares its timing a probe call)."""
    from .error_bound import error_bounds

    outs = [p for p in cb.params if p.is_output]
    reorders = exactness != "exact"
    results = []
    for n_run, (label, ins, want) in enumerate(refs):
        sr = SeedResult(seed=int(label), passed=True)
        results.append(sr)
        try:
            t_run = time.perf_counter()
            got, ins_after = B.run_with_inputs(cb, ins)
            if run_seconds is not None:
                run_seconds.append(time.perf_counter() - t_run)
        except Exception as e:  # noqa: BLE001
            sr.passed, sr.reason = False, f"run failed: {type(e).__name__}: {e}"
            if stop_at_first:
                break
            continue
        changed = [p.name for p, x, y in zip(cb.inputs, ins, ins_after)
                   if not _same_bits(np.asarray(x), np.asarray(y))]
        if changed:
            sr.passed, sr.reason = False, f"the candidate writes to its input {changed[0]}"
        alt: dict[str, list] = {}

        def rerun_alt(ins=ins, alt=alt):
            if "o" not in alt:
                alt["o"] = B.run(cb, ins, fill=_alt_fill)
            return alt["o"]

        def bounds(ins=ins):
            return None if bound_prog is None else error_bounds(bound_prog, ins, reorders, target)

        def cand_bounds(ins=ins):
            return None if cand_prog is None else error_bounds(cand_prog, ins, reorders, target,
                                                               keep=False)

        for ok, ae, re_, why in compare_outputs(outs, got, want, exactness, rerun_alt, bounds,
                                                cand_bounds if exactness == "algebraic" else None):
            sr.max_abs_err = max(sr.max_abs_err, ae)
            sr.max_rel_err = max(sr.max_rel_err, re_)
            if not ok and sr.passed:
                sr.passed, sr.reason = False, why
        for p, w in zip(outs, want):
            n_bad = int((~np.isfinite(w.astype(np.float64))).sum()) \
                if B.is_float_dtype(p.dtype) and exactness != "exact" else 0
            sr.undetermined += n_bad
            sr.compared += int(w.size) - n_bad
        if sr.passed and n_run == 0:
            # run again on buffers holding a plausible stale result (the right answer, moved):
            # a kernel that skips work when its output looks computed keeps it, and fails
            stale = [_stale(w, p.dtype) for p, w in zip(outs, want)]
            for p, a, b in zip(outs, got, B.run(cb, ins, fill=stale)):
                if not _same_bits(a, b):
                    same = (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b
                    i = tuple(int(k) for k in np.argwhere(~same)[0])
                    sr.passed, sr.reason = False, (
                        f"output {p.name} depends on what its buffer held before the call (run "
                        f"again on a buffer holding a stale result, {_fmt_index(p.name, i)} is "
                        f"{b[i]} instead of {a[i]})")
                    break
        if stop_at_first and not sr.passed:
            break
    if results and all(r.passed for r in results) and not any(r.compared for r in results):
        results[-1].passed = False
        results[-1].reason = ("the reference computes no finite value on any input: nothing was "
                              "compared")
    elif results and all(r.passed for r in results) and not target.is_gpu \
            and _has_parallel_loop(cb):
        ins0 = refs[0][1]
        why = threaded_problem(cb, refs[0], exactness, None if bound_prog is None else (
            lambda: error_bounds(bound_prog, ins0, reorders, target)))
        if why:
            results[0].passed, results[0].reason = False, why
    return results


class References:
    """The reference side of a verification, computed once per (reference, target, seeds) and
    reused for every candidate of that kernel: its program, built module, and per-seed
    ``(label, inputs, outputs)`` (``failures``: seeds whose reference run failed)."""

    def __init__(self, reference, target=None, seeds: Sequence[int] = DEFAULT_SEEDS,
                 positive: Collection[str] | str = "auto",
                 inputs: Sequence[Sequence[np.ndarray]] | None = None):
        self.target = target or B.default_target()
        self.prog = _as_program(reference)
        self.kernel = self.prog if self.prog is not None else reference
        self.sig = _params_of(self.kernel)
        self.built = self.kernel if isinstance(self.kernel, B.Built) else B.build(self.kernel,
                                                                                 self.target)
        self.from_seeds = inputs is None
        self.seeds = tuple(seeds)
        self.positive = positive
        self._inputs = inputs
        self.runs: list | None = None
        self.failures: list[SeedResult] = []

    def compute(self, cand_prog=None) -> "References":
        """Run the reference on every input set (once; later calls return at once). Inputs come
        from the reference program (else from the candidate's, else from the built module)."""
        if self.runs is not None:
            return self
        gen_from = self.prog if self.prog is not None else cand_prog if cand_prog is not None \
            else self.built
        ins_list = list(self._inputs) if self._inputs is not None else \
            [random_inputs(gen_from, s, positive=self.positive) for s in self.seeds]
        labels = list(self.seeds) if self._inputs is None else list(range(len(ins_list)))
        self.runs = []
        for label, ins in zip(labels, ins_list):
            try:
                self.runs.append((label, ins, B.run(self.built, ins)))
            except Exception as e:  # noqa: BLE001
                self.failures.append(SeedResult(
                    seed=int(label), passed=False,
                    reason=f"reference run failed: {type(e).__name__}: {e}"))
        self.n_inputs = len(ins_list)
        return self


def verify(candidate, reference, exactness: str = "exact", target=None,
           seeds: Sequence[int] = DEFAULT_SEEDS, positive: Collection[str] | str = "auto",
           inputs: Sequence[Sequence[np.ndarray]] | None = None,
           references: "References | None" = None, built: "B.Built | None" = None,
           run_seconds: list[float] | None = None) -> VerifyResult:
    """Build ``candidate`` (a LEIR program or text, or a PrimFunc) and ``reference`` (the same
    kinds) for ``target`` (default: the host CPU), run both on the inputs of each seed and
    compare every output with the rule of the module docstring. ``inputs`` (one list per run)
    replaces the seeded inputs when given.

    Beyond the comparison, a candidate fails when it races (a ``parallel`` loop whose
    iterations touch the same element), when it writes to an input, and when an output depends
    on what its buffer held before the call (it is run a second time on buffers holding another
    value, and must give the same bits: a kernel that skips work when the buffer looks done
    would time as impossibly fast). ``run_seconds``: see ``judge``.
    """
    tolerance(exactness, "f32")  # validates the class name
    target = target or (references.target if references is not None else B.default_target())
    res = VerifyResult(passed=False, exactness=exactness, target=target.key)
    cand_prog = _as_program(candidate)
    cand_kernel = cand_prog if cand_prog is not None else candidate
    try:
        cand_sig = _params_of(cand_kernel)
        if references is None:
            rp = _as_program(reference)
            ref_sig = _params_of(rp if rp is not None else reference)
        else:
            ref_sig = references.sig
    except Exception as e:  # noqa: BLE001
        res.reason = f"signature: {type(e).__name__}: {e}"
        return res
    problem = static_problem(cand_sig, ref_sig, cand_prog, target)
    if problem:
        res.reason = problem
        return res
    if built is None:
        try:
            built = cand_kernel if isinstance(cand_kernel, B.Built) else B.build(cand_kernel,
                                                                                 target)
        except Exception as e:  # noqa: BLE001 - report any lowering or build failure
            res.reason = f"candidate does not build: {type(e).__name__}: {e}"
            return res
    if references is None:
        try:
            references = References(reference, target, seeds, positive, inputs)
        except Exception as e:  # noqa: BLE001
            res.reason = f"reference does not build: {type(e).__name__}: {e}"
            return res
    # inputs come from the reference: a candidate must not choose them (wrapping a read in
    # sqrt() would otherwise make the verifier draw that tensor positive)
    refs = references.compute(cand_prog)
    runs = refs.runs
    res.seeds.extend(refs.failures)
    ref_prog = refs.prog
    res.seeds.extend(judge(built, runs, exactness, _reference_program(ref_prog, cand_prog), target,
                           cand_prog=cand_prog if ref_prog is not None else None,
                           run_seconds=run_seconds))
    for sr in res.seeds:
        res.max_abs_err = max(res.max_abs_err, sr.max_abs_err)
        res.max_rel_err = max(res.max_rel_err, sr.max_rel_err)
    all_ok = all(sr.passed for sr in res.seeds)
    res.passed = all_ok and bool(refs.n_inputs)
    if not res.passed:
        first = next((s for s in res.seeds if not s.passed), None)
        res.reason = (f"seed {first.seed} ({DISTRIBUTIONS[first.seed % len(DISTRIBUTIONS)]} "
                      f"inputs): {first.reason}" if first is not None and refs.from_seeds
                      else f"input set {first.seed}: {first.reason}" if first is not None
                      else "no inputs to verify on")
    return res
