"""The fixed workload lists of the search benchmarks (``vs_metaschedule.py``, ``search_quality.py``).

* ``TUNING`` — the kernels the search's heuristics were developed on (the register-tile column
  choices, the cost model's lane counting, the beam's constants cite them). New heuristics are
  developed on this list only.
* ``HELDOUT`` — default-size operator workloads the heuristics were never tuned on, across
  matmul (square is tuning; rectangular, skinny, batched, transposed here), conv (1-D/2-D/3-D,
  strided, dilated, grouped, depthwise, pointwise), norm, softmax, pooling and attention. The
  generalization figures (ours / MetaSchedule, best / PyTorch eager) are reported on it.
* ``FRESH`` — a second held-out list, chosen once for the sample-efficiency comparison (our
  search at 16 and at 64 measurements against MetaSchedule at 64 trials) after ``HELDOUT`` had
  been looked at for several rounds. It is FIXED: never tune on it, never swap a kernel out for
  doing badly; a kernel that stops importing is reported, not replaced. Chosen so that each
  workload's heaviest kernel (the one benchmarked) is the operator it names:

  - fused elementwise epilogues, the epilogue inside the heaviest kernel: ``gemm_bias_silu``
    (128x1024x1024 matmul + bias + SiLU), ``gemm_bias_tanh`` (64x768x768 + bias + tanh),
    ``conv2d_gelu`` (3x3 conv + bias + erf GELU; the tuning conv's shape, a new epilogue),
    ``conv1d_gelu`` (Whisper-stem conv1d 80->512 over 3000 steps + bias + GELU),
    ``conv_transpose2d_bias_relu`` (stride-2 4x4 conv-transpose + bias + ReLU) and
    ``conv2d_relu_maxpool`` (its 64->128 3x3 conv at 112x112 + bias + ReLU; the pool is a
    kernel of its own). ``gemm3d_bias_relu``, ``gemm_rowmax_sub_gelu``, ``conv3d_bn_relu`` and
    ``conv2d_bn_relu6_strided`` are not here: TVM's fusion leaves their heaviest kernel a bare
    matmul or conv.
  - one normalization of each kind: group (``groupnorm_silu``, group norm + SiLU in one
    kernel), instance (``instancenorm2d``), layer (``layernorm_gelu``, layer norm + GELU in one
    kernel) and RMS (``residual_rmsnorm`` below). The zoo's own RMS and residual layer norms do
    not qualify: ``add_rmsnorm``'s heaviest kernel is the tuning ``rmsnorm`` kernel at another
    batch (the residual add and the square are kernels of their own), and the heaviest kernel of
    ``layernorm_residual`` and ``embedding_layernorm`` is the held-out ``layernorm`` kernel. So the
    RMS norm is written in LEIR: residual add, sum of squares and scale in one kernel, as a fused
    pre-norm block computes it.
  - operators of the held-out kinds at shapes neither list has: ``matmul_small_k`` (K=8, an
    outer-product shape), ``matmul_large_k`` (K=16384, a 64x64 output), ``matmul_broadcast_batch``,
    ``conv2d_stem_7x7`` (stride-2 7x7 over 3 channels), ``log_softmax`` and ``maxpool3d``. No
    attention workload: the zoo's attention workloads all have a batched matmul as their
    heaviest kernel.

  The kernels of the earlier KernelBench-style problem-collection comparison (among them a
  matmul + bias + GELU, a conv-transpose + bias add and a group norm) are not on it: where the
  zoo has another chain of the same kind, that one is here (``PROBLEM_COMPARISON`` names the zoo
  workloads with those chains).

The three lists are pairwise disjoint, also in their kernels (``tests/test_search_benchmark_lists.py``
checks it, that every name is registered, and ``FRESH``'s composition). Each workload's kernel is
its heaviest fused kernel (``_search_common.workload_kernel``).

The zoo's ``matmul_transposed_*`` workloads do not keep their transposition: TVM's import makes
the transpose its own kernel and the heaviest one is the plain 512-square matmul of the tuning
list. The transposed matmul is therefore the benchmark kernel ``matmul_at_b`` below, written in
LEIR (``C = A^T B``, A read down its columns), with the PyTorch op it stands for.
"""

from __future__ import annotations

TUNING: tuple[str, ...] = ("matmul_square", "conv2d", "rmsnorm", "avgpool2d")

HELDOUT: tuple[str, ...] = (
    # matmul
    "matmul_rect", "matmul_tall_skinny", "matmul_skinny_m", "matmul_batched",
    "matmul_at_b",
    # conv
    "conv1d", "conv2d_strided", "conv2d_dilated", "conv2d_grouped", "conv2d_depthwise",
    "conv2d_pointwise", "conv3d",
    # norm, softmax, pooling, attention
    "layernorm", "softmax", "maxpool2d", "sdpa",
)

#: FRESH's fused elementwise-epilogue kernels (matmul / conv / conv-transpose + activation)
FRESH_EPILOGUE: tuple[str, ...] = (
    "gemm_bias_silu", "gemm_bias_tanh", "conv2d_gelu", "conv1d_gelu",
    "conv_transpose2d_bias_relu", "conv2d_relu_maxpool",
)
#: FRESH's normalizations and their kind
FRESH_NORMS: dict[str, str] = {"groupnorm_silu": "group", "instancenorm2d": "instance",
                               "layernorm_gelu": "layer", "residual_rmsnorm": "rms"}
FRESH: tuple[str, ...] = FRESH_EPILOGUE + tuple(FRESH_NORMS) + (
    "matmul_small_k", "matmul_large_k", "matmul_broadcast_batch", "conv2d_stem_7x7",
    "log_softmax", "maxpool3d",
)

#: zoo workloads with the operator chains of the earlier problem-collection comparison
#: (matmul + bias + GELU, conv-transpose + bias add, group norm): kept off FRESH
PROBLEM_COMPARISON: tuple[str, ...] = ("gemm_bias_gelu", "gemm_bias_gelu_tanh", "conv_transpose2d",
                                       "conv_transpose2d_strided", "groupnorm")

LISTS: dict[str, tuple[str, ...]] = {"heldout": HELDOUT, "tuning": TUNING, "fresh": FRESH}

#: families whose best / PyTorch-eager ratio is the vendor-library target (oneDNN's home turf)
VENDOR_FAMILIES = ("matmul", "conv")

#: zoo families of fused elementwise-epilogue and of normalization kernels (their own summary
#: line in vs_metaschedule.py)
EPILOGUE_FAMILIES = ("gemm_epilogue", "conv_chain")
NORM_FAMILIES = ("norm", "norm_chain")


#: benchmark kernels written in LEIR: name -> (family, LEIR text, PyTorch function, input shapes)
LEIR_KERNELS: dict[str, tuple[str, str, str, tuple[tuple[int, ...], ...]]] = {
    "matmul_at_b": ("matmul",
                    "kernel f32 matmul_at_b(A[512,384], B[512,640]) -> C[384,640]\n"
                    " C[i,j] += A[k,i] * B[k,j]\n",
                    "at_b", ((512, 384), (512, 640))),
    # hidden 2048 over 512 tokens; eps 1e-6 as Llama's
    "residual_rmsnorm": ("norm_chain",
                         "kernel f32 residual_rmsnorm(X[512,2048], R[512,2048], W[2048]) -> Y[512,2048]\n"
                         " H[512,2048]\n"
                         " S[512]\n"
                         " H[i,j] = X[i,j] + R[i,j]\n"
                         " S[i] += H[i,j] * H[i,j]\n"
                         " Y[i,j] = H[i,j] * rsqrt(S[i] / 2048.0 + 1e-06) * W[j]\n",
                         "add_rms", ((512, 2048), (512, 2048), (2048,))),
}


def torch_fn(key: str):
    import torch

    def add_rms(x, r, w):
        h = x + r
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    return {"at_b": lambda a, b: torch.matmul(a.t(), b), "add_rms": add_rms}[key]


def workload_list(name: str) -> tuple[str, ...]:
    try:
        return LISTS[name]
    except KeyError:
        raise SystemExit(f"unknown --list {name!r}; use one of {', '.join(LISTS)}") from None


def family(name: str) -> str:
    """The zoo family of a workload name ("" for kernels that are not zoo workloads)."""
    from steptp.zoo import workloads as W

    if name in LEIR_KERNELS:
        return LEIR_KERNELS[name][0]
    try:
        return W.get(name).family
    except KeyError:
        return ""
