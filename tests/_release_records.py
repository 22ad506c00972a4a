"""Real, small records for the release-pipeline tests (curate, export, quality, flows).

Until the extraction and search stages feed them, the tests make their records the way those
stages will: parse bundled example kernels, apply real strategies from the registry
(``steptp.strategies.candidates``), verify each after-program against the before-program with
TVM (``steptp.measure.verify.verify``) and time both (``steptp.tir.build.time``). Nothing is
made up but the workload names a kernel occurs in.
"""

from __future__ import annotations

import functools
import hashlib
import statistics

import numpy as np

from steptp import examples, strategies as S
from steptp.leir import format_program, parse
from steptp.leir.canon import canonical_hash, canonical_text
from steptp.records import KernelRecord, Occurrence, StepRecord, TensorSpec, Timing, TrajectoryRecord

# example kernel -> the workloads (architectures / operator suites) it "occurs" in
WORKLOADS = {
    "matmul_bias_gelu": [("bert", "archs"), ("gpt2", "archs")],
    "layer_norm": [("bert", "archs")],
    "softmax": [("gpt2", "archs")],
    "conv2d_relu": [("resnet", "archs")],
    "linear_leaky_relu": [("mlp", "archs")],
    "cumsum": [("scan", "ops")],
    "dual_matmul": [("llama", "archs")],
}


@functools.lru_cache(maxsize=None)
def _target():
    from steptp.tir.build import default_target

    return default_target()


def _time(text: str) -> Timing:
    from steptp.measure.verify import random_inputs
    from steptp.tir import build as B

    built = B.build(text, _target())
    ins = random_inputs(parse(text), 0)
    t = B.time(built, ins, number=5, repeat=5)
    res = sorted(t.results)
    q1, q3 = res[len(res) // 4], res[(3 * len(res)) // 4]
    med = statistics.median(res)
    return Timing(median_s=med, min_s=res[0], spread=(q3 - q1) / med if med else 0.0,
                  repeats=t.repeat, number=t.number)


def kernel_record(name: str) -> KernelRecord:
    from steptp.cot.facts import program_facts
    from steptp.tir.lower import lower
    import tvm_ffi

    prog = parse(examples.text(name))
    text = format_program(prog)
    h = canonical_hash(prog)
    func = lower(prog, _target())
    pf = program_facts(text)
    sig = [TensorSpec(name=t.name, dtype=t.dtype, shape=list(t.shape), role="input") for t in prog.inputs]
    sig += [TensorSpec(name=t.name, dtype=t.dtype, shape=list(t.shape), role="output") for t in prog.outputs]
    occ = [Occurrence(workload=w, suite=s, count=1, original_name=name) for w, s in WORKLOADS[name]]
    return KernelRecord(kernel_id=h[:16], name=name, leir=text, leir_hash=h,
                        tir_hash=f"{tvm_ffi.structural_hash(func)}",
                        signature=sig, occurrences=occ, weight=len(occ), flops=pf.flops,
                        bytes_moved=pf.bytes_moved, tvmscript=func.script(), target=_target().key,
                        raise_ok=True)


def trajectory(kernel: KernelRecord, steps: int = 2, seed: int = 0, policy: str = "greedy-test",
               with_cot: bool = True) -> tuple[list[StepRecord], TrajectoryRecord]:
    """A short greedy search: at each state the first few candidates are verified and timed
    (each one a row, as the search writes them: siblings share the before-program; a failed
    verification is a failed row) and the fastest verified one is taken."""
    from steptp.measure.verify import verify

    tid = hashlib.sha256(f"{kernel.kernel_id}|{policy}|{seed}".encode()).hexdigest()[:16]
    cur = kernel.leir
    cur_t = _time(cur)
    base_t = cur_t
    out: list[StepRecord] = []
    path: list[StepRecord] = []
    for i in range(steps):
        cands = S.candidates(parse(cur), seed=seed, max_per_site=1)[:4]
        best = None
        for c in cands:
            after = format_program(c.program)
            st = S.get(c.strategy)
            v = verify(c.program, parse(kernel.leir), exactness=c.exactness, target=_target())
            base = dict(trajectory_id=tid, step_index=i, kernel_id=kernel.kernel_id, before_leir=cur,
                        after_leir=after, strategy=c.strategy, family=st.family, exactness=c.exactness,
                        site=c.site.to_json(), params=dict(c.params), max_abs_err=v.max_abs_err,
                        max_rel_err=v.max_rel_err, before=cur_t, target=_target().key, fingerprint="test",
                        policy=policy)
            if not v.passed:
                out.append(StepRecord(**base, outcome="failed_verify", verified=False, reason=v.reason or ""))
                continue
            t = _time(after)
            rec = StepRecord(**base, outcome="improved" if t.median_s < cur_t.median_s else "not_improved",
                             verified=True, after=t, step_speedup=cur_t.median_s / t.median_s,
                             cumulative_speedup=base_t.median_s / t.median_s)
            out.append(rec)
            if best is None or t.median_s < best[1].median_s:
                best = (rec, t, after)
        if best is None:
            break
        rec, t, after = best
        path.append(rec)
        cur, cur_t = after, t
    if with_cot:
        out = [with_template_cot(s) if s.verified else s for s in out]
    best_s = min([base_t.median_s] + [s.after.median_s for s in path])
    traj = TrajectoryRecord(trajectory_id=tid, kernel_id=kernel.kernel_id, policy=policy, seed=seed,
                            n_steps=len(path), strategies=[s.strategy for s in path],
                            baseline_s=base_t.median_s, best_s=best_s, speedup=base_t.median_s / best_s,
                            final_leir=cur, target=_target().key, fingerprint="test")
    return out, traj


def with_template_cot(step: StepRecord, seed: int = 0) -> StepRecord:
    """The template's reasoning with, beside it as the CoT stage stores it, the hardware its facts
    describe (the generic core, whatever machine runs the tests), so that a release's prompt
    states the cache sizes the reasoning cites. No ``measured`` side: curation would then judge
    the predictions against these few quick timings."""
    from steptp.cot.facts import GENERIC
    from steptp.format.cot_schema import answer_json, cot_record, render
    from steptp.cot.template import TemplateWriter

    cot = TemplateWriter(seed=seed, hardware=GENERIC).write(step)
    text = render(cot, answer_json(step.strategy, step.site, step.params, step.after_leir))
    return step.model_copy(update={"cot": cot_record(cot, hardware=GENERIC.to_dict()),
                                   "cot_text": text, "cot_source": "template"})


@functools.lru_cache(maxsize=None)
def dataset(names: tuple[str, ...] = ("matmul_bias_gelu", "layer_norm", "softmax", "cumsum",
                                      "linear_leaky_relu", "dual_matmul"), steps: int = 2):
    """(kernels, steps, trajectories) of real records: a few kernels, a short walk each."""
    ks, ss, ts = [], [], []
    for n in names:
        k = kernel_record(n)
        st, tr = trajectory(k, steps=steps)
        ks.append(k)
        ss += st
        ts.append(tr)
    return ks, ss, ts


def softmax_leir(rows: int, cols: int) -> str:
    """The bundled row softmax (``examples/softmax``) at another size: programs of one shape
    group (the shard's and curation's ``shape_group``) for the tests that need several."""
    from steptp import examples

    text = examples.text("softmax").split("\n", 1)[1]      # without its comment line
    return text.replace("128", "{c}").replace("8", "{r}").format(r=rows, c=cols)
