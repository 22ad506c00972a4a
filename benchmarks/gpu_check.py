"""Build the GPU check's job folder here (TVM, no GPU): 10 kernels at GPU-sized shapes, each with
its bound-but-unoptimized baseline, up to --per-kernel one-step CUDA candidates, the multi-step
tiled schedules of ``cuda_space.tiled_schedules`` (blocks x threads, inputs staged in shared
memory, a local accumulator; labelled ``schedule:``) and a PyTorch yardstick; the runner
verifies and times them on the GPU (see gpu_check.sh).

    PYTHONPATH=. .venv/bin/python benchmarks/gpu_check.py build/gpu_job [--per-kernel 8]

Prints what was built (and what did not build, with the reason) and the folder's size (it must
travel to the GPU machine: keep it well under 64 MiB).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from steptp.leir import parse
from steptp.measure.runner.gpu import GpuJob
from steptp.search.cuda_space import bind_all, cuda_candidates, tiled_schedules
from steptp.tir.target import Target

# name -> (LEIR, torch yardstick); shapes big enough that a GPU's launch overhead is not all
# there is to time, small enough that the folder (inputs + references, 2 seeds) stays ~25 MB.
KERNELS: dict[str, tuple[str, dict]] = {
    "matmul": ("""kernel matmul(A: f32[256,256], B: f32[256,256]) -> C: f32[256,256]
  for i in 256, j in 256:
    for k in 256:
      C[i,j] += A[i,k] * B[k,j]
""", {"op": "matmul"}),
    "matmul_bias_gelu": ("""kernel fused_matmul_add_gelu(A: f32[256,256], B: f32[256,256], C: f32[256]) -> D: f32[256,256]
  T0: f32[256,256]
  for i in 256, j in 256:
    for k in 256:
      T0[i,j] += A[i,k] * B[k,j]
    D[i,j] = (T0[i,j] + C[j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
""", {"op": "matmul_bias_gelu"}),
    "conv2d_relu": ("""kernel conv2d_relu(A: f32[1,16,32,32], B: f32[32,16,3,3]) -> D: f32[1,32,32,32]
  T0: f32[1,16,34,34]
  T1: f32[1,32,32,32]
  for i in 16, j in 34, k in 34:
    T0[0,i,j,k] = where(1 <= j and j < 33 and 1 <= k and k < 33, A[0,i,j-1,k-1], 0.0)
  for i in 32, j in 32, k in 32:
    for l in 16, m in 3, n in 3:
      T1[0,i,j,k] += T0[0,l,j+m,k+n] * B[i,l,m,n]
    D[0,i,j,k] = max(T1[0,i,j,k], 0.0)
""", {"op": "conv2d_relu", "args": {"padding": 1}}),
    "softmax": ("""kernel softmax(A: f32[256,1024]) -> D: f32[256,1024]
  T0: f32[256]
  T1: f32[256]
  for i in 256:
    for j in 1024:
      T0[i] max= A[i,j]
    for j in 1024:
      T1[i] += exp(A[i,j] - T0[i])
    for j in 1024:
      D[i,j] = exp(A[i,j] - T0[i]) / T1[i]
""", {"op": "softmax"}),
    "layer_norm": ("""kernel layer_norm(A: f32[256,1024], B: f32[1024], C: f32[1024]) -> D: f32[256,1024]
  T0: f32[256]
  T1: f32[256]
  for i in 256:
    for j in 1024:
      T0[i] += A[i,j]
    for j in 1024:
      T1[i] += (A[i,j] - T0[i] * 0.0009765625) * (A[i,j] - T0[i] * 0.0009765625)
  for i in 256, j in 1024:
    D[i,j] = (A[i,j] - T0[i] * 0.0009765625) * rsqrt(T1[i] * 0.0009765625 + 1e-05) * B[j] + C[j]
""", {"op": "layer_norm"}),
    "attention": ("""kernel attention(A: f32[128,64], B: f32[256,64], C: f32[256,64]) -> D: f32[128,64]
  T0: f32[128,256]
  T1: f32[128]
  T2: f32[128]
  for i in 128:
    for j in 256:
      for k in 64:
        T0[i,j] += A[i,k] * B[j,k] * 0.125
    for j in 256:
      T1[i] max= T0[i,j]
    for j in 256:
      T2[i] += exp(T0[i,j] - T1[i])
    for l in 64:
      for j in 256:
        D[i,l] += exp(T0[i,j] - T1[i]) / T2[i] * C[j,l]
""", {"op": "attention", "args": {"scale": 0.125}}),
    "dual_matmul": ("""kernel dual_matmul(A: f32[256,256], B: f32[256,128], C: f32[256,128]) -> D: f32[256,128], E: f32[256,128]
  for i in 256, j in 128:
    for k in 256:
      D[i,j] += A[i,k] * B[k,j]
  for i in 256, j in 128:
    for k in 256:
      E[i,j] += A[i,k] * C[k,j]
""", {"op": "dual_matmul"}),
    "exp_bias": ("""kernel exp_bias(A: f32[256,1024], B: f32[256]) -> D: f32[256]
  for i in 256:
    for j in 1024:
      D[i] += exp(A[i,j] * 0.125 + B[i])
""", {"op": "row_sum_exp", "args": {"scale": 0.125}}),
    "linear_leaky_relu": ("""kernel linear_bias_leaky_relu(A: f32[256,256], B: f32[256,256], C: f32[256]) -> D: f32[256,256]
  T0: f32[256,256]
  T1: f32[256,256]
  for i in 256, j in 256:
    for k in 256:
      T0[i,j] += A[i,k] * B[k,j]
  for i in 256, j in 256:
    T1[i,j] = T0[i,j] + C[j]
  for i in 256, j in 256:
    D[i,j] = where(T1[i,j] > 0.0, T1[i,j], T1[i,j] * 0.01)
""", {"op": "linear_leaky_relu", "args": {"slope": 0.01}}),
    "cumsum": ("""kernel cumsum(A: f64[128,1024]) -> B: f64[128,1024]
  for i in 128:
    B[i,0] = A[i,0]
    for j in 1023:
      B[i,j+1] = B[i,j] + A[i,j+1]
""", {"op": "cumsum"}),
}


def _spread_out(cands, n: int):
    """Up to ``n`` candidates, taking each strategy's first before any strategy's second."""
    by: dict[str, list] = defaultdict(list)
    for c in cands:
        by[c.strategy].append(c)
    out, rank = [], 0
    while len(out) < n and any(len(v) > rank for v in by.values()):
        for s in sorted(by):
            if rank < len(by[s]) and len(out) < n:
                out.append(by[s][rank])
        rank += 1
    return out


def build(out: Path, per_kernel: int, seeds: tuple[int, ...], with_schedules: bool = True
          ) -> GpuJob:
    job = GpuJob(Target.cuda(), seeds=seeds, cpu_outputs=False,
                 timing={"warmup": 5, "repeats": 30})
    for name, (text, torch) in KERNELS.items():
        t0 = time.perf_counter()
        prog = parse(text)
        job.add_task(name, prog, torch=torch)
        base = bind_all(prog)
        if base is None or job.add_candidate(name, base, role="baseline",
                                             label="bound baseline") is None:
            print(f"{name}: the bound baseline does not build: {job.failures[-1:]}")
            continue
        n0 = len(job.candidates)
        pool = cuda_candidates(prog, seed=0, max_per_site=2)
        for c in _spread_out(pool, 3 * per_kernel):
            if len(job.candidates) - n0 >= per_kernel:
                break
            job.add_candidate(name, c.program, c.exactness, label=c.label)
        n1 = len(job.candidates)
        schedules = tiled_schedules(prog) if with_schedules else []
        for sc in schedules:
            job.add_candidate(name, sc.program, sc.exactness,
                              label=f"schedule: {sc.label} ({len(sc.steps)} steps)")
        print(f"{name}: {n1 - n0} one-step candidates of {len(pool)}, "
              f"{len(job.candidates) - n1} of {len(schedules)} schedules "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    job.write(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"job {job.id}: {len(job.tasks)} kernels, {len(job.candidates)} artifacts "
          f"({sum(c['role'] == 'candidate' for c in job.candidates)} candidates + baselines), "
          f"{len(job.failures)} did not build, {size / 2**20:.1f} MiB in {out}")
    for f in job.failures:
        print(f"  not built: {f['task']} {f['label']}: {f['reason'][:160]}")
    return job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the job folder to write")
    ap.add_argument("--per-kernel", type=int, default=8, help="candidates per kernel (besides "
                                                                "the baseline)")
    ap.add_argument("--seeds", default="0,4", help="input seeds (distributions) to verify on")
    ap.add_argument("--no-schedules", action="store_true",
                    help="one-step candidates only (the check as it was before the tiled "
                         "schedules)")
    a = ap.parse_args()
    seeds = tuple(int(s) for s in a.seeds.split(","))
    t0 = time.perf_counter()
    build(a.out, a.per_kernel, seeds, with_schedules=not a.no_schedules)
    print(f"built in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
