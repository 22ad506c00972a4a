"""Step records built from small LEIR programs for the CoT tests (nothing is measured: the
timings are given, so each test can say what was "measured")."""

from __future__ import annotations

from steptp import strategies as S
from steptp.leir import format_program, parse
from steptp.records import StepRecord, Timing

KERNELS = {
    # a pure copy: no access is reused; the write walks B with stride 64
    "transpose": """kernel transpose(A: f32[64,32]) -> B: f32[32,64]
  for i in 64, j in 32:
    B[j,i] = A[i,j]
""",
    # two nests that share loop names; the reduction writes the intermediate G, not the output
    "mm_add": """kernel mm_add(A: f32[8,32], B: f32[32,32], C: f32[8,32]) -> D: f32[8,32]
  G: f32[8,32]
  for i in 8, j in 32:
    for k in 32:
      G[i,j] += A[i,k] * B[k,j]
  for i in 8, j in 32:
    D[i,j] = G[i,j] + C[i,j]
""",
    "scale_exp": """kernel scale_exp(X: f32[4096]) -> Y: f32[4096]
  for i in 4096:
    Y[i] = exp(X[i] * 0.5)
""",
    # producer/consumer whose common outer loop has one iteration
    "one_row": """kernel one_row(A: f32[1,32]) -> D: f32[1,32]
  T: f32[1,32]
  for i in 1, j in 32:
    T[i,j] = A[i,j] * 2.0
  for i in 1, j in 32:
    D[i,j] = T[i,j] + 1.0
""",
    # rows of 48: too wide for one AVX-512 register and not a multiple of 16 lanes, so vector
    # code only pays after a split by 16
    "rows48": """kernel rows48(X: f32[64,48]) -> Y: f32[64,48]
  for i in 64, j in 48:
    Y[i,j] = exp(X[i,j] * 0.5)
""",
    # a loss with two logs per element (logsimp makes them one: costly operations, compute)
    "nll": """kernel nll(A: f32[65536], B: f32[65536]) -> C: f32[65536]
  D: f32[65536]
  E: f32[65536]
  for i in 65536:
    D[i] = B[i] * B[i] + 1.0
    E[i] = A[i] * A[i] + 1.0
    C[i] = D[i] * E[i] - log(D[i]) - log(E[i])
""",
    "rowsum": """kernel rowsum(A: f32[64,256]) -> S: f32[64]
  for i in 64:
    for j in 256:
      S[i] += A[i,j]
""",
}


def program_text(kernel: str) -> str:
    return format_program(parse(KERNELS[kernel]))


def step(kernel: str, strategy: str, site: dict, params: dict, speedup: float = 1.0,
         step_index: int = 0, before: str | None = None, spread: float = 0.02,
         trajectory: str | None = None) -> StepRecord:
    """``strategy`` applied to ``kernel`` (or to the LEIR text ``before``), with given timings."""
    p = parse(before if before is not None else KERNELS[kernel])
    new = S.apply(p, strategy, site, params)
    before_s = 2.0e-5
    return StepRecord(
        trajectory_id=trajectory or f"t-{kernel}", step_index=step_index, kernel_id=kernel,
        before_leir=format_program(p), after_leir=format_program(new), strategy=strategy,
        family=S.get(strategy).family,
        exactness=S.get(strategy).exactness_for(p, S.Site.from_json(site), params),
        site=site, params=params, outcome="improved" if speedup > 1 + spread else "not_improved",
        verified=True, max_abs_err=0.0,
        before=Timing(median_s=before_s, min_s=before_s * 0.97, spread=spread, repeats=5, number=20),
        after=Timing(median_s=before_s / speedup, min_s=before_s / speedup * 0.97, spread=spread,
                     repeats=5, number=20),
        step_speedup=speedup, cumulative_speedup=speedup, target="llvm -mcpu=generic",
        fingerprint="test")
