"""The workload registry: every model Step-TP imports into TVM, by name.

    from steptp.zoo import workloads
    w = workloads.get("conv2d_depthwise")
    module, inputs = w.build("tiny")             # eval-mode nn.Module + seeded example inputs
    for w in workloads.suite("tiny"): ...        # a small subset for CI

Suites: ``ops`` (single operators), ``fused`` (operator chains), ``arch`` (whole ``transformers``
models), ``leir`` (hand-written fused kernels stored as LEIR templates, ``steptp/zoo/leir/``; they
are their own LEIR and skip the PyTorch import), ``user`` (registered at run time with
:func:`register`, see ``steptp.zoo.user``); ``tiny`` is a small subset of the built-in zoo for CI
and ``default`` is the whole built-in zoo (ops + fused + arch + leir). ``all`` is ``default`` plus
every registered user workload.
"""

from __future__ import annotations

from steptp.zoo import archs as _archs
from steptp.zoo import fused as _fused
from steptp.zoo import leir as _leir
from steptp.zoo import ops as _ops
from steptp.zoo._base import DTYPES, SIZES, SUITES, Workload, stable_seed

__all__ = ["Workload", "WORKLOADS", "get", "suite", "names", "register", "SUITE_NAMES",
           "TINY_SUITE", "UnknownName", "DTYPES", "SIZES", "SUITES", "stable_seed"]

WORKLOADS: dict[str, Workload] = {}


def register(workload: Workload, *, replace: bool = False) -> Workload:
    """Add a workload to the registry (user models; the built-in zoo registers at import)."""
    if workload.name in WORKLOADS and not replace:
        raise ValueError(f"a workload named {workload.name!r} is already registered")
    WORKLOADS[workload.name] = workload
    return workload


for _w in (*_ops.WORKLOADS, *_fused.WORKLOADS, *_archs.WORKLOADS, *_leir.WORKLOADS):
    register(_w)
del _w

#: The CI subset: a few representative kernels of every kind, two small architectures, and the
#: four LEIR-native kernels that between them host every algebraic/algorithmic strategy that no
#: imported kernel has a site for (one operator per statement leaves those no home).
TINY_SUITE: tuple[str, ...] = (
    "matmul_square", "matmul_transposed_b", "gemv", "conv2d", "conv2d_depthwise", "maxpool2d",
    "layernorm", "rmsnorm", "gelu", "softmax", "sum_dim", "cumsum", "cross_entropy_loss",
    "sdpa_causal",
    "gemm_bias_gelu", "conv2d_bn_relu", "attention_block", "swiglu_mlp", "layernorm_residual",
    "bert", "resnet",
    "fused_attention_decode", "generalized_box_iou", "rlhf_token_kl", "gp_product_kernel",
    "softmax_running_max", "gamma_nll",
)

SUITE_NAMES = ("ops", "fused", "arch", "leir", "user", "tiny", "default", "all")


def names(suite_name: str | None = None) -> list[str]:
    """Workload names, all of them or those of one suite, in registry order."""
    if suite_name is None:
        return list(WORKLOADS)
    return [w.name for w in suite(suite_name)]


class UnknownName(KeyError):
    """An unknown workload or suite name; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


def _unknown(kind: str, value: str, valid: list[str]) -> KeyError:
    import difflib

    close = difflib.get_close_matches(value, valid, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    return UnknownName(f"unknown {kind} {value!r}.{hint} Valid {kind}s: {', '.join(valid)}")


def get(name: str) -> Workload:
    """The workload called ``name``; a KeyError listing the valid names otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise _unknown("workload", name, list(WORKLOADS)) from None


def suite(name: str) -> list[Workload]:
    """The workloads of a suite (see the module docstring), in registry order."""
    if name in ("ops", "fused", "arch", "leir", "user"):
        return [w for w in WORKLOADS.values() if w.suite == name]
    if name == "tiny":
        return [get(n) for n in TINY_SUITE]
    if name == "default":
        return [w for w in WORKLOADS.values() if w.suite != "user"]
    if name == "all":
        return list(WORKLOADS.values())
    raise _unknown("suite", name, list(SUITE_NAMES))
