"""The fixed workload lists of the search benchmarks (``vs_metaschedule.py``, ``search_quality.py``).

* ``TUNING`` — the kernels the search's heuristics were developed on (the register-tile column
  choices, the cost model's lane counting, the beam's constants cite them). New heuristics are
  developed on this list only.
* ``HELDOUT`` — default-size operator workloads the heuristics were never tuned on, across
  matmul (square is tuning; rectangular, skinny, batched, transposed here), conv (1-D/2-D/3-D,
  strided, dilated, grouped, depthwise, pointwise), norm, softmax, pooling and attention. The
  generalization figures (ours / MetaSchedule, best / PyTorch eager) are reported on it.

The two lists are disjoint (``tests/test_search_benchmark_lists.py`` checks it, and that every
name is a registered operator workload). Each workload's kernel is its heaviest fused kernel
(``_search_common.workload_kernel``).

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

LISTS: dict[str, tuple[str, ...]] = {"heldout": HELDOUT, "tuning": TUNING}

#: families whose best / PyTorch-eager ratio is the vendor-library target (oneDNN's home turf)
VENDOR_FAMILIES = ("matmul", "conv")


#: benchmark kernels written in LEIR: name -> (family, LEIR text, PyTorch function, input shapes)
LEIR_KERNELS: dict[str, tuple[str, str, str, tuple[tuple[int, ...], ...]]] = {
    "matmul_at_b": ("matmul",
                    "kernel f32 matmul_at_b(A[512,384], B[512,640]) -> C[384,640]\n"
                    " C[i,j] += A[k,i] * B[k,j]\n",
                    "at_b", ((512, 384), (512, 640))),
}


def torch_fn(key: str):
    import torch

    return {"at_b": lambda a, b: torch.matmul(a.t(), b)}[key]


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
