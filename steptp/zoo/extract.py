"""Kernel extraction: workloads → fused TIR PrimFuncs → LEIR kernel records (one parquet table).

    from steptp.zoo import extract
    result = extract.extract(extract.refs_for_zoo("tiny"), jobs=2)
    extract.write(result, "kernels.parquet")          # + kernels.summary.json next to it

Two phases:

1. **scan** (one task per workload): build the module and its seeded inputs, ``torch.export``,
   import into Relax (unsupported ATen operators become opaque calls and are reported, the rest
   of the model still comes through; see ``steptp.zoo.relax_import``), fuse, and for every fused
   PrimFunc: its TVMScript, TIR structural hash, how often ``main`` calls it, and the raised,
   canonically renamed LEIR with its hash, signature, FLOPs and bytes (or the raise failure's
   reason). With ``model_check`` the whole model is also compiled with TVM and compared with
   PyTorch eager (``steptp.zoo.model_check.whole_model_check``).
2. **check** (one task per *unique* kernel): the raise check, ``lower(raise(f))`` numerically
   equal to ``f`` (``steptp.measure.verify`` with exactness ``exact`` on seeds 0, 1, 2). The
   reference is ``f`` parsed back from the recorded TVMScript, so the check also vouches for the
   record's text (the scan checks that the TVMScript round-trips to the same structural hash).

**LEIR-native workloads** (the ``leir`` suite, ``steptp.zoo.leir``, and user files given with
``refs_for_leir`` / ``steptp extract --leir``) are hand-written kernels, not models: the scan
renders the template at the size, parses and checks it, canonicalises it and lowers it
(``steptp.tir.lower``); the record's TVMScript and TIR hash are those of the lowered canonical
program, its occurrence is ``(workload, kernel name, 1 call)``. There is no raise step, so the
record says ``raise_ok=True`` with a ``raise_reason`` starting ``leir-native``; the check phase
builds the lowered kernel and runs it on seeds 0, 1, 2 against the NumPy LEIR interpreter
(``steptp.leir.interp``) when the interpreter can afford it (``INTERP_WORK_LIMIT`` statement
executions), otherwise it only builds and runs it. A failure there sets ``raise_ok=False``.

Kernels are deduplicated across all workloads by their canonical LEIR hash (kernels that do not
raise: by the TIR structural hash). Each record lists its occurrences (workload, suite, PrimFunc
name, number of calls) sorted by workload order then name; ``weight`` is the total number of
calls. The kernel id is the first 16 hex digits of the canonical LEIR hash (kernels that do not
raise: of the SHA-256 of their TVMScript printed under the name ``k``).

Tasks exchange only plain data (text, numbers), never TVM objects. Bounds: with ``isolate``
(the default for ``jobs > 1`` and for user code -- problem files and model factories) every task
runs in a ``steptp.measure.worker`` process under a memory limit (RLIMIT_AS; default an equal
share of 80% of the machine per job, and never more workers than the machine holds at the given
limit), every scan under a deadline and every kernel check under a time budget; a worker that
dies, runs out of memory or is killed at its deadline costs only its task, which is reported
(``crashed``, ``timeout``, ``check-crashed``, over its budget). Before any check runs its cost
is estimated from the kernel's FLOPs and bytes (``check_estimate``): a problem-file workload
with a kernel over the budget is scanned again at a reduced scale, a kernel still over it is
recorded as ``check-skipped`` with the estimate; the checks of one problem file together are
planned within ``problem_check_budget_s``. Problem files are untrusted code: their workers are
contained (``steptp.measure.sandbox``: no network, read-only files, user ``nobody`` when root).
A log file (``log_path``) gets a line per finished workload and kernel check. Results are merged in workload order, so the output does
not depend on ``jobs`` or on timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["WorkloadRef", "KernelScan", "WorkloadScan", "CheckResult", "ExtractResult",
           "refs_for_zoo", "refs_for_model", "refs_for_problems", "refs_for_leir",
           "scan_workload", "scan_leir_program", "check_kernel", "check_native", "extract",
           "write", "summary_path", "INTERP_WORK_LIMIT"]

#: LEIR-native kernels are checked against the NumPy interpreter when one run needs at most this
#: many statement executions (about a second); larger ones are only built and run.
INTERP_WORK_LIMIT = 300_000


# ----------------------------------------------------------------------------- references
@dataclass(frozen=True)
class WorkloadRef:
    """A picklable description of a workload that a worker process can rebuild.

    ``kind``: ``registry`` (``name`` in ``steptp.zoo.workloads``), ``factory`` (``source`` is
    ``pkg.module:factory``, ``inputs`` an optional input spec), ``problem`` (``source`` is a
    KernelBench-style file, ``scale`` its scale) or ``leir`` (``source`` is a user ``.leir`` file,
    a LEIR template or plain LEIR).
    """

    kind: str
    name: str
    source: str = ""
    inputs: str | None = None
    scale: float | str = 1.0
    size: str = "tiny"
    dtype: str = "float32"

    def workload(self):
        from steptp.zoo import user, workloads

        if self.kind == "registry":
            return workloads.get(self.name)
        if self.kind == "factory":
            return user.from_factory(self.source, inputs=self.inputs, name=self.name)
        if self.kind == "problem":
            return user.problem_workload(self.source, scale=self.scale, tiny_scale=None)
        if self.kind == "leir":
            from steptp.zoo import leir

            return leir.workload(leir.load_file(self.source), suite="user")
        raise ValueError(f"unknown workload kind {self.kind!r}")


def refs_for_zoo(spec: str, size: str = "tiny", dtype: str = "float32") -> list[WorkloadRef]:
    """``spec`` is a suite name (``tiny``, ``ops``, ``default``...) or workload names separated
    by commas (suites may be mixed in). Duplicates are dropped, order is kept."""
    from steptp.zoo import workloads

    out: list[WorkloadRef] = []
    seen: set[str] = set()
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"--zoo {spec!r}: name a suite ({', '.join(workloads.SUITE_NAMES)}) "
                         f"or workloads separated by commas")
    for part in parts:
        if part in workloads.SUITE_NAMES:
            names = [w.name for w in workloads.suite(part)]
        else:
            names = [workloads.get(part).name]  # UnknownName lists the valid names
        for n in names:
            if n not in seen:
                seen.add(n)
                out.append(WorkloadRef("registry", n, size=size, dtype=dtype))
    return out


def refs_for_model(target: str, inputs: str | None = None, size: str = "tiny",
                   dtype: str = "float32") -> list[WorkloadRef]:
    """One user model, ``pkg.module:factory`` or ``path/to/file.py:factory`` (built once here so
    that a bad reference or input spec fails before any work starts)."""
    from steptp.zoo import user

    w = user.from_factory(target, inputs=inputs)
    return [WorkloadRef("factory", w.name, source=target, inputs=inputs, size=size, dtype=dtype)]


def refs_for_problems(directory: str | os.PathLike, scale: float | str = 1.0,
                      size: str = "default", dtype: str = "float32") -> list[WorkloadRef]:
    """One reference per KernelBench-style problem file in ``directory`` (sorted by name).
    ``scale``: a factor, ``elements=N`` or ``seconds=T`` (``steptp.zoo.user.parse_scale``)."""
    from steptp.zoo import user

    sc = str(user.parse_scale(scale))
    ws = user.load_problems(directory, scale=sc, tiny_scale=None)
    return [WorkloadRef("problem", w.name, source=str(w.meta["source"]), scale=sc,
                        size=size, dtype=dtype) for w in ws]


def refs_for_leir(paths: Sequence[str | os.PathLike], size: str = "tiny",
                  dtype: str = "float32", required: bool = True) -> list[WorkloadRef]:
    """One reference per user LEIR file: each path is a ``.leir`` file (a LEIR template, see
    ``steptp.zoo.leir``, or plain LEIR) or a folder of them. Every file is read, rendered at
    ``size``, parsed and checked here -- only parsed, never executed -- so that a bad file fails
    with ``steptp.zoo.leir.LeirTemplateError`` (file, line, column) before any work starts. The
    workload is named after the file (its stem); two different files with one name are an
    error. ``dtype`` does not apply: a LEIR file declares its own dtypes. ``required=False``: a
    template without a ``size`` preset is left out instead of an error (every template has
    ``tiny`` and ``default``; a profile's extra sizes need not be in every file)."""
    from steptp.zoo import leir

    out: list[WorkloadRef] = []
    seen: dict[str, str] = {}
    for p in paths:
        for t in leir.load_path(p, check_sizes=(size,) if required else ()):
            if not required:
                if size not in t.sizes:
                    continue
                t.program(size)
            src = str(Path(t.source).resolve())
            if t.name in seen:
                if seen[t.name] != src:
                    raise leir.LeirTemplateError(
                        t.source, f"another LEIR file gives the workload name {t.name!r}: "
                        f"{seen[t.name]} (rename one of them)")
                continue
            seen[t.name] = src
            out.append(WorkloadRef("leir", t.name, source=src, size=size, dtype="float32"))
    return out


# ----------------------------------------------------------------------------- scan (phase 1)
@dataclass
class KernelScan:
    """One fused PrimFunc of one workload, as plain data."""

    name: str
    calls: int
    tvmscript: str
    tir_hash: str
    script_hash: str
    leir: str = ""          # canonical text (canonical names, the PrimFunc's name as kernel name)
    leir_hash: str = ""
    names: dict = field(default_factory=dict)
    signature: list = field(default_factory=list)
    flops: int = 0
    bytes_moved: int = 0
    raise_reason: str = ""  # "" when the raise succeeded
    raise_detail: str = ""
    native: bool = False    # a LEIR-native kernel: no raise step, the LEIR is the source

    @property
    def key(self) -> str:
        return f"leir:{self.leir_hash}" if self.leir_hash else f"tir:{self.tir_hash}"

    @property
    def kernel_id(self) -> str:
        return (self.leir_hash or self.script_hash)[:16]


@dataclass
class WorkloadScan:
    workload: str
    suite: str
    ok: bool = False
    error: str = ""
    stage: str = ""
    kernels: list[KernelScan] = field(default_factory=list)
    unsupported: list[dict] = field(default_factory=list)
    model_check: dict | None = None
    seconds: float = 0.0
    meta: dict = field(default_factory=dict)


def _short(e: BaseException, limit: int = 300) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:limit]


def _signature(program) -> list[dict]:
    return [{"name": t.name, "dtype": t.tvm_dtype, "shape": [int(d) for d in t.shape],
             "role": "input" if i < len(program.inputs) else "output"}
            for i, t in enumerate(program.params)]


def _tir_signature(f) -> list[dict]:
    from steptp.tir.build import signature

    try:
        return [{"name": p.name, "dtype": p.dtype, "shape": list(p.shape),
                 "role": "output" if p.is_output else "input"} for p in signature(f)]
    except Exception:  # noqa: BLE001 - symbolic shapes: no static signature
        return []


def scan_primfunc(name: str, f, calls: int = 1) -> KernelScan:
    """Raise one PrimFunc and describe it (never raises: failures go into ``raise_reason``)."""
    import tvm
    import tvm_ffi

    from steptp.leir import analysis
    from steptp.leir.canon import canonical_hash, canonicalize
    from steptp.leir.printer import format_program
    from steptp.tir.raise_ import RaiseError, raise_primfunc

    script = f.script(name=name)
    tir_hash = str(tvm_ffi.structural_hash(f))
    k = KernelScan(name=name, calls=calls, tvmscript=script, tir_hash=tir_hash,
                   script_hash=hashlib.sha256(f.script(name="k").encode()).hexdigest())
    try:
        prog = raise_primfunc(f, name)
    except RaiseError as e:
        k.raise_reason, k.raise_detail = e.reason, str(e.detail)[:300]
        k.signature = _tir_signature(f)
        return k
    except Exception as e:  # noqa: BLE001 - a raiser bug must not cost the workload
        k.raise_reason, k.raise_detail = "raise-crashed", _short(e)
        k.signature = _tir_signature(f)
        return k
    # The raise check's reference is parsed back from this text: it must mean the same kernel
    # (structural equality is too strict: the parser re-infers region dtypes and the like).
    try:
        back = tvm.script.from_source(script)
        if isinstance(back, tvm.IRModule):
            back = back["main"]
        same = canonical_hash(raise_primfunc(back, name)) == canonical_hash(prog)
    except Exception as e:  # noqa: BLE001
        k.raise_reason, k.raise_detail = "tvmscript-roundtrip", _short(e)
        k.signature = _tir_signature(f)
        return k
    if not same:
        k.raise_reason, k.raise_detail = "tvmscript-roundtrip", \
            "the printed TVMScript parses to a kernel that raises differently"
        k.signature = _tir_signature(f)
        return k
    canon, meta = canonicalize(prog)
    k.leir = format_program(canon)
    k.leir_hash = canonical_hash(prog)
    k.names = meta
    k.signature = _signature(canon)
    try:
        k.flops = int(analysis.flops(canon))
        k.bytes_moved = int(analysis.bytes_moved(canon))
    except Exception:  # noqa: BLE001 - analyses are best effort; the record still counts
        pass
    return k


def scan_leir_program(program, calls: int = 1) -> KernelScan:
    """Describe a LEIR-native kernel: canonicalised, lowered (the reference PrimFunc is
    ``lower(canonical program)``), no raise step. Lowering errors propagate."""
    import tvm_ffi

    from steptp.leir import analysis
    from steptp.leir.canon import canonical_hash, canonicalize
    from steptp.leir.printer import format_program
    from steptp.tir.lower import lower

    canon, meta = canonicalize(program)
    name = program.name
    f = lower(canon)
    k = KernelScan(name=name, calls=calls, tvmscript=f.script(name=name),
                   tir_hash=str(tvm_ffi.structural_hash(f)),
                   script_hash=hashlib.sha256(f.script(name="k").encode()).hexdigest(),
                   leir=format_program(canon), leir_hash=canonical_hash(program), names=meta,
                   signature=_signature(canon), native=True)
    try:
        k.flops = int(analysis.flops(canon))
        k.bytes_moved = int(analysis.bytes_moved(canon))
    except Exception:  # noqa: BLE001 - analyses are best effort
        pass
    return k


def _scan_leir(w, ref: WorkloadRef, res: WorkloadScan) -> None:
    res.stage = "parse"
    if w.suite != "user" and ref.dtype not in w.dtypes:
        raise ValueError(f"workload {w.name!r} does not support dtype {ref.dtype!r}; "
                         f"supported: {list(w.dtypes)} (a LEIR kernel's dtypes are in its text)")
    prog = w.leir_program(ref.size)
    res.stage = "lower"
    res.kernels.append(scan_leir_program(prog))
    res.meta["leir_native"] = True


def scan_workload(ref: WorkloadRef, model_check: bool = False,
                  target: dict | None = None) -> WorkloadScan:
    """Phase 1 for one workload (never raises; failures are in ``error``/``stage``).
    ``model_check`` does not apply to LEIR-native workloads (they have no PyTorch model)."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    t0 = time.perf_counter()
    res = WorkloadScan(workload=ref.name, suite="?")
    from steptp.measure import sandbox

    if sandbox.state() is not None:
        res.meta["sandbox"] = sandbox.state()
    try:
        res.stage = "build"
        w = ref.workload()
        res.suite = w.suite
        if w.is_leir:
            _scan_leir(w, ref, res)
            res.ok = True
            res.stage = ""
            res.seconds = time.perf_counter() - t0
            return res
        module, inputs = w.build(ref.size, ref.dtype)
        res.stage = "import"
        from steptp.zoo.relax_import import ImportReport, call_counts, import_module, primfuncs

        report = ImportReport()
        mod, _params = import_module(module, inputs, target=target, unsupported="opaque",
                                     report=report)
        res.unsupported = [u.to_dict() for u in report.unsupported]
        res.unsupported += [{"op": op, "error": "no TIR legalization for this Relax operator",
                             "count": 1} for op in report.unlegalized]
        counts = call_counts(mod)
        res.stage = "raise"
        for name, f in primfuncs(mod):
            res.kernels.append(scan_primfunc(name, f, counts.get(name, 1)))
        res.ok = True
        res.stage = ""
        if model_check:
            from steptp.zoo.model_check import whole_model_check

            c = whole_model_check(w, size=ref.size, dtype=ref.dtype, target=target)
            res.model_check = {k: v for k, v in c.to_dict().items() if k != "target"}
        if w.meta.get("applied_scale"):
            res.meta["applied_scale"] = dict(w.meta["applied_scale"])
        if w.meta.get("scale_fallbacks"):
            res.meta["scale_fallbacks"] = list(w.meta["scale_fallbacks"])
        if w.meta.get("scale_used"):
            res.meta["scale_used"] = w.meta["scale_used"].get(ref.size)
    except Exception as e:  # noqa: BLE001 - reported per workload, the run goes on
        res.ok = False
        res.error = _short(e, 500)
        limit = os.environ.get("STEPTP_WORKER_MEMORY_MB")
        if limit and (isinstance(e, MemoryError) or "allocate memory" in str(e)):
            res.error = f"over the worker's memory limit of {limit} MB: {res.error}"[:500]
        res.meta["traceback"] = traceback.format_exc(limit=6)[-2000:]
    res.seconds = time.perf_counter() - t0
    return res


# ----------------------------------------------------------------------------- check (phase 2)
@dataclass
class CheckResult:
    key: str
    passed: bool
    max_abs_err: float | None = None
    reason: str = ""
    seconds: float = 0.0


def gather_bounds(prog) -> dict[str, int]:
    """Integer inputs that end up as subscripts, with the extent they index (exclusive bound),
    also through intermediates: ``E[i] = B[i]; D[i] = A[E[i]]`` bounds ``B`` by ``A``'s extent.
    (Direct subscripts are what ``verify.random_inputs`` finds itself; this adds the copies that
    Relax's advanced indexing makes, so the raise check never gathers out of bounds.)"""
    from steptp.leir import ast as A

    tensors = prog.tensors
    ints = {t.name for t in (*prog.inputs, *prog.intermediates) if t.dtype in A.INT_DTYPES}
    inputs = {t.name for t in prog.inputs}
    bounds: dict[str, int] = {}
    nodes = [n for st in prog.body for n in A.walk(st)]
    for n in nodes:
        if isinstance(n, (A.Load, A.Assign)) and n.tensor in tensors:
            for dim, sub in zip(tensors[n.tensor].shape, n.index):
                for ld in A.loads(sub):
                    if ld.tensor in ints:
                        bounds[ld.tensor] = min(bounds.get(ld.tensor, dim), dim)
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if isinstance(n, A.Assign) and n.op == "=" and n.tensor in bounds:
                for ld in A.loads(n.value):
                    if ld.tensor in ints and bounds.get(ld.tensor, 1 << 62) > bounds[n.tensor]:
                        bounds[ld.tensor] = bounds[n.tensor]
                        changed = True
    return {k: v for k, v in sorted(bounds.items()) if k in inputs}


def check_kernel(key: str, leir: str, tvmscript: str, seeds: Sequence[int] = (0, 1, 2)
                 ) -> CheckResult:
    """The raise check of one kernel: its LEIR, lowered and built, against the PrimFunc parsed
    from its TVMScript (``exact`` tolerance). Never raises."""
    t0 = time.perf_counter()
    try:
        import tvm

        from steptp.leir import parse
        from steptp.measure.verify import verify

        from steptp.measure.verify import random_inputs

        ref = tvm.script.from_source(tvmscript)
        if isinstance(ref, tvm.IRModule):
            ref = ref["main"]
        prog = parse(leir)
        bounds = gather_bounds(prog)
        inputs = [random_inputs(prog, s, index_bounds=bounds) for s in seeds] if bounds else None
        v = verify(prog, ref, exactness="exact", seeds=tuple(seeds), inputs=inputs)
        out = CheckResult(key, bool(v.passed), float(v.max_abs_err),
                          "" if v.passed else f"verify: {v.reason}"[:500])
    except Exception as e:  # noqa: BLE001
        out = CheckResult(key, False, None, _crash_reason(e))
    out.seconds = time.perf_counter() - t0
    return out


def check_native(key: str, leir: str, seeds: Sequence[int] = (0, 1, 2),
                 work_limit: int | None = None) -> CheckResult:
    """The check of a LEIR-native kernel: lower and build it, run it on seeded inputs and, when
    the interpreter can afford it (``work_limit``, default ``INTERP_WORK_LIMIT``), compare every
    output with the NumPy LEIR interpreter's (``exact`` tolerance). Never raises."""
    t0 = time.perf_counter()
    try:
        from steptp.leir import interp, parse
        from steptp.measure.verify import compare, random_inputs
        from steptp.tir import build as B

        prog = parse(leir)
        built = B.build(prog)
        bounds = gather_bounds(prog)
        limit = INTERP_WORK_LIMIT if work_limit is None else work_limit
        work = interp.work(prog)
        use_interp = work <= limit
        worst = 0.0
        outs = [p for p in built.params if p.is_output]
        for s in seeds:
            ins = random_inputs(prog, s, index_bounds=bounds or None)
            got = B.run(built, ins)
            if not use_interp:
                continue
            want = interp.run(prog, ins, check_program=False)
            for p, g in zip(outs, got):
                ok, ae, _re, why = compare(g, want[p.name], p.dtype, "exact", name=p.name)
                worst = max(worst, ae)
                if not ok:
                    why = f"TVM differs from the LEIR interpreter on seed {s}: {why}"
                    out = CheckResult(key, False, float(ae), why[:500])
                    out.seconds = time.perf_counter() - t0
                    return out
        seeds_txt = ", ".join(map(str, seeds))
        if use_interp:
            out = CheckResult(key, True, float(worst), f"lowered, built and matched the LEIR "
                              f"interpreter on seeds {seeds_txt}")
        else:
            out = CheckResult(key, True, None, f"lowered, built and ran on seeds {seeds_txt} (too "
                              f"large for the interpreter check: {work} statement executions)")
    except Exception as e:  # noqa: BLE001
        out = CheckResult(key, False, None, _crash_reason(e))
    out.seconds = time.perf_counter() - t0
    return out


def _crash_reason(e: BaseException) -> str:
    """A check's failure as a record's reason; running out of the worker's memory says so."""
    limit = os.environ.get("STEPTP_WORKER_MEMORY_MB")
    if isinstance(e, MemoryError) or "allocate memory" in str(e) or "Unable to allocate" in str(e):
        where = f"the worker's memory limit of {limit} MB" if limit else "the machine's memory"
        return f"check-out-of-memory: the check needs more than {where}: {_short(e)}"[:500]
    return f"check-crashed: {_short(e)}"


def _check_keys(args: tuple[str, str, str, bool]) -> tuple[str, str, str]:
    """(reference hash, kernel hash, config) of a raise check in the measurement cache's
    verdicts: the TVMScript it is checked against, the LEIR checked (and how), and this
    module's source (the check's code; the cache adds that of ``measure``, ``tir`` and
    ``leir``). Only passed checks are kept: a failure may be a busy machine's timeout."""
    from ..codehash import source_hash

    _key, leir, tvmscript, native = args
    h = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    return (h(tvmscript or ""), h(f"{'native' if native else 'raised'}\0{leir}"),
            f"raise-check:{source_hash(('zoo/extract.py',))}")


def _cached_check(cache, args: tuple[str, str, str, bool], target_key: str) -> CheckResult | None:
    ref, ker, cfg = _check_keys(args)
    r = cache.get_verification(ref, ker, target_key, "raise-check", cfg)
    if not r or not r.get("passed"):
        return None
    # the record is the one the check wrote: a release does not depend on what a cache held
    return CheckResult(args[0], True, r.get("max_abs_err"), r.get("reason", ""))


def _remember_check(cache, args: tuple[str, str, str, bool], target_key: str, c: CheckResult) -> None:
    ref, ker, cfg = _check_keys(args)
    try:
        cache.put_verification(ref, ker, target_key, "raise-check", cfg,
                               {"passed": True, "max_abs_err": c.max_abs_err, "reason": c.reason})
    except Exception:  # noqa: BLE001 - a cache that cannot be written costs a check next time
        pass


def _check_task(key: str, leir: str, tvmscript: str, native: bool) -> CheckResult:
    return check_native(key, leir) if native else check_kernel(key, leir, tvmscript)


# ----------------------------------------------------------------------------- bounds
#: how fast an *unscheduled* kernel runs, for the check's cost estimate before it runs. A naive
#: 512^3 float32 matmul alone reaches ~1.3 GFLOP/s here, but a 256x2048x2048 one in a busy
#: extraction took 118 s for its check (~0.2 GFLOP/s over ~9 runs): long inner loops over wide
#: rows miss the caches. Conservative figures; the deadline still bounds what they miss.
NAIVE_FLOP_S = 2.0e8
NAIVE_BYTE_S = 5.0e8
#: program runs per seed in a raise check: the reference, the candidate, the candidate again
#: with another output fill (the unwritten-output test on NaNs; on the first seed, the
#: stale-buffer test), and the reference's float64 error-bound twin when the fixed tolerances
#: fail somewhere (steptp.measure.verify)
RUNS_PER_SEED = 4
#: the comparison of one output makes float64 copies of both sides, their difference and its
#: relative form (``steptp.measure.verify.compare``): 4 float64 arrays per output element. A
#: 98 M-element output needed 784 MiB for each of them, past a worker's limit (issue 35)
COMPARE_F64_COPIES = 4
#: a check's cost beyond running the kernels: parsing, lowering and building the reference and
#: the raised kernel with TVM, and the worker's round trip (about 1.5 s each on a busy 2-core
#: machine for the kernels of a small architecture)
CHECK_OVERHEAD_S = 1.5
#: defaults of the per-task bounds (params.yaml ``extract``, ``steptp extract`` options)
CHECK_BUDGET_S = 120.0
SCAN_TIMEOUT_S = 600.0
#: the scan of user code (a problem file, a model factory) gets less by default: an
#: architecture problem at a reduced scale scans in seconds; a stuck one costs one problem
USER_SCAN_TIMEOUT_S = 60.0
#: the raise checks of one problem file's kernels together, estimated before any runs
#: (``CHECK_OVERHEAD_S`` + ``check_estimate`` each): the rest of its kernels are recorded
#: ``check-skipped``, so a folder of architectures (dozens of kernels each) ends in bounded time
PROBLEM_CHECK_BUDGET_S = 30.0
#: the workers together may use this share of the machine's memory
MEMORY_SHARE = 0.8


def machine_memory_mb() -> int:
    """Physical memory, or the cgroup's limit when it is lower (what the OOM killer enforces)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            v = Path(f).read_text().strip()
        except OSError:
            continue
        if v.isdigit():
            total = min(total, int(v))
    return int(total >> 20)


def plan_workers(jobs: int, memory_limit_mb: int | None) -> tuple[int, int, str]:
    """``(jobs, per-worker memory limit in MB, note)``: by default each worker gets an equal share
    of ``MEMORY_SHARE`` of the machine; an explicit limit that, times ``jobs``, would exceed that
    lowers ``jobs`` instead (never two workers that together exceed the machine)."""
    machine = int(machine_memory_mb() * MEMORY_SHARE)
    if memory_limit_mb is None:
        return jobs, max(256, machine // jobs), ""
    limit = int(memory_limit_mb)
    if limit < 256:
        raise ValueError(f"memory limit {limit} MB per worker is too small (TVM and torch "
                         f"alone need about 1 GB of address space); give at least 1024")
    fit = max(1, machine // limit)
    if fit < jobs:
        return fit, limit, (f"jobs lowered from {jobs} to {fit}: {jobs} workers of {limit} MB "
                            f"would exceed {machine} MB ({MEMORY_SHARE:.0%} of the machine)")
    return jobs, limit, ""


def check_estimate(flops: int, bytes_moved: int, signature: Sequence[dict],
                   seeds: int = 3) -> tuple[float, int]:
    """``(seconds, bytes)`` the raise check of one kernel is expected to need, before it runs:
    ``RUNS_PER_SEED`` unscheduled runs (the reference and the raised LEIR lowered) on every seed;
    memory for each seed's inputs, the programs' outputs and the comparison's float64 copies of
    them (``COMPARE_F64_COPIES``)."""
    import numpy as np

    one = float(flops) / NAIVE_FLOP_S + float(bytes_moved) / NAIVE_BYTE_S
    tensor_bytes = 0
    for t in signature:
        try:
            item = np.dtype("bool" if t["dtype"] == "bool" else t["dtype"]).itemsize
        except TypeError:
            item = 4
        n = 1
        for d in t["shape"]:
            n *= int(d)
        tensor_bytes += n * item * (seeds if t.get("role") == "input" else 3)
        if t.get("role") != "input":
            tensor_bytes += n * 8 * COMPARE_F64_COPIES
    return RUNS_PER_SEED * seeds * one, tensor_bytes


# ----------------------------------------------------------------------------- running tasks
def scan_task(payload: dict) -> WorkloadScan:
    """Worker entry point (``steptp.measure.worker`` task ``extract_scan``)."""
    return scan_workload(payload["ref"], payload.get("model_check", False), payload.get("target"))


def check_task(payload: dict) -> CheckResult:
    """Worker entry point (``steptp.measure.worker`` task ``extract_check``)."""
    return _check_task(*payload["args"])


class _Pool:
    """Runs tasks in this process (``isolate=False``) or in ``steptp.measure.worker`` processes,
    each under a memory limit (RLIMIT_AS) and every task under a deadline (the worker's process
    group is killed past it); a worker that dies or is killed costs only its task."""

    def __init__(self, jobs: int, isolate: bool, memory_limit_mb: int, sandbox: bool = False):
        self.jobs, self.isolate, self.memory_limit_mb = jobs, isolate, memory_limit_mb
        self.sandbox = sandbox
        self.scratch: str | None = None
        self.pool = None

    def _workers(self):
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            from steptp.measure.worker import WorkerPool

            # Workers die with the *thread* that started them (PR_SET_PDEATHSIG), so the
            # threads that start them live as long as the pool.
            self.threads = ThreadPoolExecutor(max_workers=self.jobs)
            env = {"STEPTP_WORKER_PRELOAD": "steptp.tir.build,torch,steptp.zoo.extract",
                   "PYTHONWARNINGS": "ignore",
                   # a user model (pkg.module:factory) imports in a worker as it did here
                   "PYTHONPATH": os.pathsep.join(
                       p for p in (os.path.abspath(q or os.curdir) for q in sys.path)
                       if os.path.isdir(p))}
            if self.sandbox:
                import tempfile

                from steptp.measure import sandbox

                # each worker mounts its own private tmpfs here (steptp.measure.sandbox)
                self.scratch = tempfile.mkdtemp(prefix="steptp-sandbox-")
                os.chmod(self.scratch, 0o755)
                env.update({sandbox.ENV_FLAG: "1", sandbox.ENV_SCRATCH: self.scratch})
            self.pool = WorkerPool(size=self.jobs, num_threads=1,
                                   memory_limit_mb=self.memory_limit_mb, env=env)
        return self.pool

    def run(self, task: str, fn: Callable, payloads: Sequence[dict], timeouts: Sequence[float],
            on_done: Callable[[int, Any], None], failed: Callable[[int, str, str], Any]) -> list:
        """``fn(payload)`` for every payload; results in order. A task that did not finish gets
        ``failed(i, status, reason)`` (status ``timeout``, ``crash`` or ``error``)."""
        results: list = [None] * len(payloads)
        if not self.isolate:
            for i, pl in enumerate(payloads):
                results[i] = fn(pl)
                on_done(i, results[i])
            return results
        from concurrent.futures import as_completed

        wp = self._workers()
        futs = {self.threads.submit(wp.run, task, pl, timeouts[i]): i
                for i, pl in enumerate(payloads)}
        for fut in as_completed(futs):
            i = futs[fut]
            r = fut.result()
            if r.ok:
                results[i] = r.value
            else:
                why = r.reason or r.status
                if r.status in ("crash", "error") and self.memory_limit_mb:
                    why += f" (the worker's memory limit is {self.memory_limit_mb} MB)"
                results[i] = failed(i, r.status, why)
            on_done(i, results[i])
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.threads.shutdown(wait=True)
        self.pool = None
        if self.scratch is not None:
            import shutil

            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _failed_scan(refs: Sequence[WorkloadRef], timeouts: Sequence[float]):
    def make(i: int, status: str, why: str) -> WorkloadScan:
        if status == "timeout":
            error = f"scan over its time limit: {why} (scan timeout {timeouts[i]:g} s)"
        elif status == "crash":
            error = f"worker process died (a crash in TVM or torch, or its memory limit): {why}"
        else:
            error = f"worker error: {why}"
        return WorkloadScan(workload=refs[i].name, suite="?", ok=False, error=error[:500],
                            stage="timeout" if status == "timeout" else "crashed")
    return make


class _Log:
    """One line per finished workload and kernel check, appended to a log file (progress that
    needs no terminal)."""

    def __init__(self, path: str | os.PathLike | None, echo: Callable[[str], None] | None = None):
        self.f, self.echo = None, echo
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def __call__(self, msg: str) -> None:
        if self.f is not None:
            self.f.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + msg + "\n")
            self.f.flush()
        if self.echo is not None:
            self.echo(msg)

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
        self.f = None


# ----------------------------------------------------------------------------- merge
@dataclass
class ExtractResult:
    records: list                     # KernelRecord, in first-occurrence order
    scans: list[WorkloadScan]
    checks: dict[str, CheckResult]
    target: dict
    seconds: dict[str, float]
    options: dict = field(default_factory=dict)

    # -- summary figures
    def summary(self) -> dict[str, Any]:
        recs = self.records
        n_unique = len(recs)
        n_ok = sum(1 for r in recs if r.raise_ok)
        by_reason: dict[str, int] = {}
        failures: list[dict] = []
        for s in self.scans:
            if not s.ok:
                failures.append({"workload": s.workload, "stage": s.stage or "scan",
                                 "op": "", "kernel": "", "reason": s.error})
            for u in s.unsupported:
                failures.append({"workload": s.workload, "stage": "import", "op": u["op"],
                                 "kernel": "", "reason": u["error"], "count": u["count"]})
        for r in recs:
            if not r.raise_ok:
                code = r.raise_reason.split(":", 1)[0] if r.raise_reason else "unknown"
                by_reason[code] = by_reason.get(code, 0) + 1
                for o in r.occurrences:
                    failures.append({"workload": o.workload, "stage": "raise", "op": "",
                                     "kernel": o.original_name, "kernel_id": r.kernel_id,
                                     "reason": r.raise_reason})
        per_wl = []
        for s in self.scans:
            row = {"workload": s.workload, "suite": s.suite, "ok": s.ok,
                   "kernels": len(s.kernels), "calls": sum(k.calls for k in s.kernels),
                   "unsupported_ops": [u["op"] for u in s.unsupported],
                   "seconds": round(s.seconds, 3)}
            if s.model_check is not None:
                row["model_check"] = s.model_check
            if s.meta.get("applied_scale"):
                row["applied_scale"] = s.meta["applied_scale"]
            if s.meta.get("scale_used"):
                row["scale_used"] = s.meta["scale_used"]
            if s.meta.get("check_reduced"):
                row["check_reduced"] = s.meta["check_reduced"]
            per_wl.append(row)
        mc = [s.model_check for s in self.scans if s.model_check is not None]
        total_s = self.seconds.get("total", 0.0)
        found = sum(len(s.kernels) for s in self.scans)
        return {
            "models_tried": len(self.scans),
            "models_ok": sum(1 for s in self.scans if s.ok),
            "kernels_found": found,
            "unique_kernels": n_unique,
            "raise_ok": n_ok,
            "raise_success_rate": (n_ok / n_unique) if n_unique else None,
            "raise_failures_by_reason": dict(sorted(by_reason.items())),
            "model_check": None if not mc else {
                "checked": len(mc), "passed": sum(1 for c in mc if c["passed"])},
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "seconds_per_model": round(total_s / len(self.scans), 3) if self.scans else None,
            "kernels_per_second": round(found / total_s, 3) if total_s else None,
            "target": self.target,
            "options": self.options,
            "workloads": per_wl,
            "failures": failures,
        }


def _merge(scans: Sequence[WorkloadScan]) -> tuple[dict[str, list[tuple[WorkloadScan, KernelScan]]], list[str]]:
    groups: dict[str, list[tuple[WorkloadScan, KernelScan]]] = {}
    order: list[str] = []
    for s in scans:
        for k in sorted(s.kernels, key=lambda k: k.name):
            if k.key not in groups:
                groups[k.key] = []
                order.append(k.key)
            groups[k.key].append((s, k))
    return groups, order


def _record(group: list[tuple[WorkloadScan, KernelScan]], check: CheckResult | None,
            target_key: str):
    from steptp.records import KernelRecord, Occurrence, TensorSpec

    _s0, k0 = group[0]
    occ = [Occurrence(workload=s.workload, suite=s.suite, count=k.calls, original_name=k.name)
           for s, k in group]
    if k0.native:  # no raise step: the LEIR is the source (the check builds and runs it)
        if check is None:
            raise_ok, reason, err = True, "leir-native: no raise step (not checked)", None
        else:
            raise_ok, reason, err = check.passed, f"leir-native: no raise step; {check.reason}" \
                if check.passed else f"leir-native: {check.reason}", check.max_abs_err
    elif k0.raise_reason:
        raise_ok, reason, err = False, f"{k0.raise_reason}: {k0.raise_detail}".rstrip(": "), None
    elif check is None:
        raise_ok, reason, err = False, "not checked", None
    else:
        raise_ok, reason, err = check.passed, check.reason, check.max_abs_err
    return KernelRecord(
        kernel_id=k0.kernel_id, name=k0.name, leir=k0.leir, leir_hash=k0.leir_hash,
        tir_hash=k0.tir_hash, signature=[TensorSpec(**t) for t in k0.signature],
        occurrences=occ, weight=sum(o.count for o in occ), flops=k0.flops,
        bytes_moved=k0.bytes_moved, tvmscript=k0.tvmscript, target=target_key,
        raise_ok=raise_ok, raise_max_abs_err=err, raise_reason=reason, names=k0.names)


# ----------------------------------------------------------------------------- entry point
def _reduced_ref(ref: WorkloadRef, f: float) -> WorkloadRef:
    """The same problem with its sizes scaled by about ``f`` (< 1) more."""
    from dataclasses import replace

    from steptp.zoo import user

    sc = user.parse_scale(ref.scale)
    if sc.kind == "factor":
        new = user.Scale("factor", max(user.MIN_FACTOR, sc.value * f))
    elif sc.kind == "elements":
        new = user.Scale("elements", float(max(1, int(sc.value * f * f))))
    else:
        new = user.Scale("seconds", sc.value * f ** 3)
    return replace(ref, scale=str(new))


def _over_budget(k: KernelScan, budget_s: float, memory_mb: int | None) -> str:
    """Why the raise check of ``k`` would exceed its bounds ("" when it fits)."""
    est_s, est_b = check_estimate(k.flops, k.bytes_moved, k.signature)
    if est_s > budget_s:
        return (f"estimated {est_s:.0f} s for the check ({k.flops:.3g} FLOPs and "
                f"{k.bytes_moved:.3g} bytes per run, unscheduled, {RUNS_PER_SEED} runs x 3 seeds) over "
                f"the budget of {budget_s:g} s")
    if memory_mb and est_b > (memory_mb << 20) // 2:
        return (f"estimated {est_b >> 20} MB of tensors for the check, over half the "
                f"worker's memory limit of {memory_mb} MB")
    return ""


def _plan_problem_checks(to_check: list, groups: dict, refs: Sequence[WorkloadRef],
                         budget_s: float, skipped: dict, log) -> list:
    """Keep, per problem file, the checks whose estimated costs (``CHECK_OVERHEAD_S`` plus
    ``check_estimate``) fit ``budget_s`` together, in the order the kernels were found (a
    kernel counts against the problem it was first found in); the others go to ``skipped``."""
    problems = {r.name for r in refs if r.kind == "problem"}
    spent: dict[str, float] = {}
    planned: dict[str, int] = {}
    out = []
    for item in to_check:
        key, _leir, _script, native = item
        scan, k = groups[key][0]
        if native or scan.workload not in problems:
            out.append(item)
            continue
        cost = CHECK_OVERHEAD_S + check_estimate(k.flops, k.bytes_moved, k.signature)[0]
        used = spent.get(scan.workload, 0.0)
        if used + cost > budget_s:
            why = (f"check-skipped: the checks of problem {scan.workload} are over its budget of "
                   f"{budget_s:g} s (estimated {cost:.1f} s for this one, {used:.1f} s planned "
                   f"for {planned.get(scan.workload, 0)} before it)")
            skipped[key] = CheckResult(key, False, None, why)
            log(f"kernel {k.name} ({k.kernel_id}): {why}")
            continue
        spent[scan.workload] = used + cost
        planned[scan.workload] = planned.get(scan.workload, 0) + 1
        out.append(item)
    return out


def _describe_sandbox(st: dict) -> str:
    return (f"network {st.get('network')}; files {st.get('files')}; user {st.get('user')} "
            f"(uid {st.get('uid')})")


def extract(refs: Sequence[WorkloadRef], jobs: int = 1, model_check: bool = False,
            check: bool = True, progress: bool = False, console=None,
            memory_limit_mb: int | None = None, check_budget_s: float = CHECK_BUDGET_S,
            scan_timeout_s: float | None = None, isolate: bool | None = None,
            log_path: str | os.PathLike | None = None,
            problem_check_budget_s: float | None = PROBLEM_CHECK_BUDGET_S,
            sandbox: bool | None = None, log: Callable[[str], None] | None = None,
            check_cache=None) -> ExtractResult:
    """Scan every workload, deduplicate, raise-check every unique kernel, build the records.

    ``jobs``: worker processes. ``check=False`` skips the raise check (records then say
    ``raise_ok=False``, reason ``not checked``; LEIR-native records keep ``raise_ok=True``: they
    have no raise step). ``progress`` shows rich progress bars on ``console``.

    Bounds. With ``isolate`` (default: when ``jobs > 1``, a memory limit is given, or a
    workload is user code -- a problem file or a model factory) every task runs in a
    ``steptp.measure.worker`` process under ``memory_limit_mb`` (default: an equal share of
    ``MEMORY_SHARE`` of the machine per job; an explicit limit lowers ``jobs`` rather than let
    the workers together exceed the machine); a scan gets ``scan_timeout_s``, a kernel check
    ``check_budget_s``, and a task past its deadline or over its memory is killed and reported
    (the run goes on). Before any check runs, its cost is estimated from the kernel's FLOPs and
    bytes (``check_estimate``); a problem-file workload with a kernel over the budget is
    scanned again at a reduced scale (recorded in its ``scale_used``), and a kernel still over
    it is not run: its record says ``check-skipped`` with the estimate. ``scan_timeout_s``
    None: ``USER_SCAN_TIMEOUT_S`` for problem files and model factories, ``SCAN_TIMEOUT_S`` for
    the zoo. ``problem_check_budget_s`` (None: unbounded) bounds the checks of one problem
    file's kernels together, planned from the estimates plus ``CHECK_OVERHEAD_S`` each, in the
    order the kernels were found; a kernel that does not fit is ``check-skipped`` with the
    reason (deterministic: the plan depends on the kernels, not on timing).

    ``sandbox`` (default: when the workers run problem files): the workers contain the code
    they run (``steptp.measure.sandbox``: no network, read-only files but a private scratch
    tmpfs, user ``nobody`` when run as root); what was achieved is in the log and in
    ``options["sandbox"]``. Problem files run in process (``isolate=False``) are not contained.

    ``log_path``: a line per finished workload and per kernel check is appended there; ``log``
    is called with each such line too (a flow's logger: the build log shows the extraction's
    progress).
    """
    from steptp.tir.target import Target

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if not refs:
        raise ValueError("no workloads to extract")
    if check_budget_s <= 0 or (scan_timeout_s is not None and scan_timeout_s <= 0) or \
            (problem_check_budget_s is not None and problem_check_budget_s <= 0):
        raise ValueError("check_budget_s, scan_timeout_s and problem_check_budget_s must be "
                         "positive")
    asked_jobs = jobs
    jobs, mem_mb, jobs_note = plan_workers(jobs, memory_limit_mb)
    if isolate is None:
        isolate = asked_jobs > 1 or memory_limit_mb is not None or \
            any(r.kind in ("problem", "factory") for r in refs)
    if sandbox is None:
        sandbox = any(r.kind == "problem" for r in refs)
    sandbox = bool(sandbox and isolate)

    def scan_timeout(r: WorkloadRef) -> float:
        if scan_timeout_s is not None:
            return scan_timeout_s
        return USER_SCAN_TIMEOUT_S if r.kind in ("problem", "factory") else SCAN_TIMEOUT_S
    tgt = Target.host_cpu()
    target_dict = tgt.tvm_dict()
    t0 = time.perf_counter()
    bar = _Progress(progress, console)
    log = _Log(log_path, log)
    if jobs_note:
        log(jobs_note)
    log(f"extract: {len(refs)} workloads, jobs {jobs}, "
        + (f"isolated workers of {mem_mb} MB, scan timeout "
           f"{', '.join(sorted({f'{scan_timeout(r):g} s' for r in refs}))}, "
           if isolate else "in process, ")
        + f"check budget {check_budget_s:g} s"
        + (f", {problem_check_budget_s:g} s of checks per problem"
           if problem_check_budget_s is not None and any(r.kind == "problem" for r in refs)
           else "")
        + (", sandboxed workers" if sandbox else ""))
    refs = list(refs)
    sandbox_state: dict | None = None
    with bar, _Pool(jobs, isolate, mem_mb, sandbox) as pool:
        task = bar.add("scan workloads", len(refs))

        def scanned(i: int, s: WorkloadScan) -> None:
            nonlocal sandbox_state
            if sandbox and sandbox_state is None and s.meta.get("sandbox"):
                sandbox_state = s.meta["sandbox"]
                log(f"problem files run in contained workers: {_describe_sandbox(sandbox_state)}")
            bar.advance(task, f"{s.workload}: {len(s.kernels)} kernels"
                        + ("" if s.ok else " [failed]"))
            su = s.meta.get("scale_used") or {}
            log(f"workload {s.workload}: " + (f"{len(s.kernels)} kernels" if s.ok else
                                              f"FAILED at {s.stage}: {s.error}")
                + (f", {len(s.unsupported)} unsupported ops" if s.unsupported else "")
                + (f", scale {su.get('form')} (factor {su.get('factor'):g})"
                   if su.get("form") else "") + f", {s.seconds:.1f} s")

        def scan(idx: list[int]) -> list[WorkloadScan]:
            items = [{"ref": refs[i], "model_check": model_check, "target": target_dict}
                     for i in idx]
            return pool.run("extract_scan", scan_task, items, [scan_timeout(refs[i]) for i in idx],
                            scanned, _failed_scan([refs[i] for i in idx],
                                                  [scan_timeout(refs[i]) for i in idx]))

        scans = scan(list(range(len(refs))))
        # kernels whose check would exceed the bounds: reduce their problems once
        redo: dict[int, float] = {}
        for i, sc in enumerate(scans):
            if refs[i].kind != "problem" or not check:
                continue
            for k in sc.kernels:
                if k.raise_reason or k.native:
                    continue
                est_s, _b = check_estimate(k.flops, k.bytes_moved, k.signature)
                if _over_budget(k, check_budget_s, mem_mb if isolate else None):
                    f = max(1 / 16, min(0.5, 0.8 * (check_budget_s / max(est_s, 1e-9)) ** (1 / 3)))
                    redo[i] = min(redo.get(i, 1.0), f)
        if redo:
            idx = sorted(redo)
            old = {i: refs[i] for i in idx}
            for i in idx:
                refs[i] = _reduced_ref(refs[i], redo[i])
                log(f"workload {refs[i].name}: a kernel's check is over its bounds at scale "
                    f"{old[i].scale}; scanning again at scale {refs[i].scale}")
            task = bar.add("re-scan at a reduced scale", len(idx))
            for i, sc in zip(idx, scan(idx)):
                sc.meta["check_reduced"] = {"from": str(old[i].scale), "to": str(refs[i].scale)}
                scans[i] = sc
        t1 = time.perf_counter()
        groups, order = _merge(scans)
        skipped: dict[str, CheckResult] = {}
        to_check = []
        for key in order:
            k = groups[key][0][1]
            if k.raise_reason:
                continue
            why = "" if k.native else _over_budget(k, check_budget_s, mem_mb if isolate else None)
            if why and check:
                skipped[key] = CheckResult(key, False, None, f"check-skipped: {why}")
                log(f"kernel {k.name} ({k.kernel_id}): check skipped: {why}")
                continue
            to_check.append((key, k.leir, k.tvmscript, k.native))
        checks: dict[str, CheckResult] = {}
        if check and to_check and check_cache is not None:
            left = []
            for a in to_check:
                hit = _cached_check(check_cache, a, tgt.key)
                if hit is None:
                    left.append(a)
                else:
                    checks[a[0]] = hit
            if len(left) < len(to_check):
                log(f"extract: {len(to_check) - len(left)} of {len(to_check)} raise checks passed "
                    f"before with the same kernel, reference and check code ({check_cache.path}): "
                    f"not run again")
            to_check = left
        if check and problem_check_budget_s is not None:
            to_check = _plan_problem_checks(to_check, groups, refs, problem_check_budget_s,
                                            skipped, log)
        if check and to_check:
            ctask = bar.add("raise check (unique kernels)", len(to_check))

            def checked(i: int, c: CheckResult) -> None:
                checks[c.key] = c
                if check_cache is not None and c.passed:
                    _remember_check(check_cache, to_check[i], tgt.key, c)
                k = groups[c.key][0][1]
                bar.advance(ctask, k.name + ("" if c.passed else " [failed]"))
                log(f"kernel {k.name} ({k.kernel_id}): check "
                    + ("passed" if c.passed else f"FAILED: {c.reason}") + f", {c.seconds:.1f} s")

            def failed(i: int, status: str, why: str) -> CheckResult:
                what = f"check over its budget: {why}" if status == "timeout" else \
                    f"check-crashed: {why}"
                return CheckResult(to_check[i][0], False, None, what[:500])

            pool.run("extract_check", check_task, [{"args": a} for a in to_check],
                     [check_budget_s] * len(to_check), checked, failed)
        checks.update(skipped)
    t2 = time.perf_counter()
    records = [_record(groups[key], checks.get(key), tgt.key) for key in order]
    n_ok = sum(1 for r in records if r.raise_ok)
    log(f"extract done: {sum(1 for s in scans if s.ok)}/{len(scans)} workloads, "
        f"{len(records)} unique kernels, {n_ok} raise ok, {t2 - t0:.1f} s")
    log.close()
    options = {"jobs": jobs, "model_check": model_check, "check": check,
               "sizes": sorted({r.size for r in refs}), "dtypes": sorted({r.dtype for r in refs}),
               "isolated": bool(isolate), "check_budget_s": check_budget_s}
    if isolate:
        options.update(memory_limit_mb=mem_mb,
                       scan_timeout_s=sorted({scan_timeout(r) for r in refs}))
    if problem_check_budget_s is not None and any(r.kind == "problem" for r in refs):
        options["problem_check_budget_s"] = problem_check_budget_s
    if sandbox:
        options["sandbox"] = sandbox_state or {"network": "unknown (no workload scanned)"}
    if jobs_note:
        options["jobs_note"] = jobs_note
    return ExtractResult(
        records=records, scans=list(scans), checks=checks, target=tgt.to_dict(),
        seconds={"scan": t1 - t0, "check": t2 - t1, "total": t2 - t0}, options=options)


class _Progress:
    """rich progress bars, or nothing."""

    def __init__(self, enabled: bool, console=None):
        self.p = None
        if enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                              console=console, transient=False)

    def __enter__(self):
        if self.p is not None:
            self.p.__enter__()
        return self

    def __exit__(self, *exc):
        if self.p is not None:
            self.p.__exit__(*exc)

    def add(self, what: str, total: int):
        return self.p.add_task(what, total=total, last="") if self.p is not None else None

    def advance(self, task, last: str = "") -> None:
        if self.p is not None:
            self.p.update(task, advance=1, last=last)


# ----------------------------------------------------------------------------- output
def summary_path(out: str | os.PathLike) -> Path:
    """``kernels.parquet`` -> ``kernels.summary.json`` (same folder)."""
    out = Path(out)
    return out.with_name(out.name[: -len(out.suffix)] + ".summary.json" if out.suffix
                         else out.name + ".summary.json")


def write(result: ExtractResult, out: str | os.PathLike) -> tuple[Path, Path]:
    """Write the records (parquet) and the summary (JSON), each atomically."""
    from steptp.records import KernelRecord, table, write_table, write_text_atomic

    out = Path(out)
    write_table(table(result.records, KernelRecord), out)
    sp = write_text_atomic(summary_path(out),
                           json.dumps(result.summary(), indent=2, sort_keys=False) + "\n")
    return out, sp
