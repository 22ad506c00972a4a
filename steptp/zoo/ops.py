"""The operator suite: one operator per workload (the single kernels a network is made of).

Every factory takes ``(p, g)``: the size preset's parameters and a seeded ``torch.Generator``,
and returns ``(module, inputs)`` in float32 (``Workload.build`` seeds, casts and sets eval mode).
``tiny`` sizes export and import in well under a second; ``default`` sizes are the shapes a
CPU measurement run uses (layer shapes of common networks, a few MFLOP to a few GFLOP).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from steptp.zoo._base import Lambda, Workload, rand, randint, randn, supported_dtypes

WORKLOADS: list[Workload] = []


def _op(name: str, family: str, tiny: dict[str, Any], default: dict[str, Any],
        dtypes: tuple[str, ...] | None = None, description: str = "",
        meta: dict[str, Any] | None = None):
    if family == "scan":
        # relax.cumsum/cumprod are lowered by relax.backend.DispatchSortScan (needs a target),
        # not by LegalizeOps; the PrimFunc it makes is one opaque sblock (a sequential scan).
        meta = {"lowering": "DispatchSortScan", **(meta or {})}

    def deco(factory):
        WORKLOADS.append(Workload(name=name, suite="ops", family=family, factory=factory,
                                  sizes={"tiny": tiny, "default": default},
                                  dtypes=dtypes or supported_dtypes(name),
                                  description=description or (factory.__doc__ or "").strip(),
                                  meta=dict(meta or {})))
        return factory
    return deco


def _fn(fn, name: str = "") -> nn.Module:
    return Lambda(fn, name)


# ============================================================================ matmul
@_op("matmul_square", "matmul", {"n": 16}, {"n": 512})
def _matmul_square(p, g):
    """C = A @ B, square n x n."""
    n = p["n"]
    return _fn(torch.matmul, "A@B"), (randn(g, n, n), randn(g, n, n))


@_op("matmul_rect", "matmul", {"m": 8, "k": 24, "n": 16}, {"m": 256, "k": 1024, "n": 512})
def _matmul_rect(p, g):
    """C = A @ B, rectangular (m x k) @ (k x n)."""
    return _fn(torch.matmul), (randn(g, p["m"], p["k"]), randn(g, p["k"], p["n"]))


@_op("matmul_batched", "matmul", {"b": 2, "m": 8, "k": 16, "n": 8},
     {"b": 16, "m": 128, "k": 256, "n": 128})
def _bmm(p, g):
    """torch.bmm: (b, m, k) @ (b, k, n)."""
    return _fn(torch.bmm), (randn(g, p["b"], p["m"], p["k"]), randn(g, p["b"], p["k"], p["n"]))


@_op("matmul_3d_2d", "matmul", {"b": 2, "s": 8, "k": 16, "n": 8},
     {"b": 4, "s": 128, "k": 768, "n": 768})
def _matmul_3d2d(p, g):
    """(b, s, k) @ (k, n): a 3-D activation times a weight matrix (broadcast over the batch)."""
    return _fn(torch.matmul), (randn(g, p["b"], p["s"], p["k"]), randn(g, p["k"], p["n"]))


@_op("matmul_4d", "matmul", {"b": 1, "h": 2, "s": 8, "d": 8},
     {"b": 2, "h": 12, "s": 128, "d": 64})
def _matmul_4d(p, g):
    """(b, h, s, d) @ (b, h, d, s): attention-score shaped 4-D batched matmul."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return _fn(torch.matmul), (randn(g, b, h, s, d), randn(g, b, h, d, s))


@_op("matmul_broadcast_batch", "matmul", {"b": 3, "m": 8, "k": 16, "n": 8},
     {"b": 8, "m": 128, "k": 256, "n": 256})
def _matmul_bcast(p, g):
    """(b, m, k) @ (1, k, n): batch broadcast on the right operand."""
    return _fn(torch.matmul), (randn(g, p["b"], p["m"], p["k"]), randn(g, 1, p["k"], p["n"]))


@_op("matmul_transposed_b", "matmul", {"m": 8, "k": 16, "n": 12}, {"m": 512, "k": 512, "n": 512})
def _matmul_tb(p, g):
    """A @ B.T (B stored n x k, the nn.Linear layout)."""
    return _fn(lambda a, b: a @ b.T, "A@B.T"), (randn(g, p["m"], p["k"]), randn(g, p["n"], p["k"]))


@_op("matmul_transposed_a", "matmul", {"m": 8, "k": 16, "n": 12}, {"m": 512, "k": 512, "n": 512})
def _matmul_ta(p, g):
    """A.T @ B (A stored k x m)."""
    return _fn(lambda a, b: a.T @ b, "A.T@B"), (randn(g, p["k"], p["m"]), randn(g, p["k"], p["n"]))


@_op("matmul_transposed_both", "matmul", {"m": 8, "k": 16, "n": 12},
     {"m": 512, "k": 512, "n": 512})
def _matmul_tt(p, g):
    """A.T @ B.T."""
    return (_fn(lambda a, b: a.T @ b.T, "A.T@B.T"),
            (randn(g, p["k"], p["m"]), randn(g, p["n"], p["k"])))


@_op("matmul_skinny_m", "matmul", {"m": 2, "k": 32, "n": 16}, {"m": 8, "k": 4096, "n": 1024})
def _matmul_skinny(p, g):
    """A few rows times a wide matrix (decode-time linear layer)."""
    return _fn(torch.matmul), (randn(g, p["m"], p["k"]), randn(g, p["k"], p["n"]))


@_op("matmul_tall_skinny", "matmul", {"m": 64, "k": 8, "n": 4}, {"m": 8192, "k": 64, "n": 16})
def _matmul_tall(p, g):
    """A tall matrix times a narrow one (many rows, few columns)."""
    return _fn(torch.matmul), (randn(g, p["m"], p["k"]), randn(g, p["k"], p["n"]))


@_op("gemv", "matmul", {"m": 16, "k": 32}, {"m": 4096, "k": 4096})
def _gemv(p, g):
    """Matrix-vector product (m x k) @ (k,)."""
    return _fn(torch.mv), (randn(g, p["m"], p["k"]), randn(g, p["k"]))


@_op("vecmat", "matmul", {"k": 32, "n": 16}, {"k": 4096, "n": 4096})
def _vecmat(p, g):
    """Vector-matrix product (k,) @ (k x n)."""
    return _fn(torch.matmul), (randn(g, p["k"]), randn(g, p["k"], p["n"]))


@_op("matmul_large_k", "matmul", {"m": 4, "k": 256, "n": 4}, {"m": 64, "k": 16384, "n": 64})
def _matmul_large_k(p, g):
    """Small output, long reduction."""
    return _fn(torch.matmul), (randn(g, p["m"], p["k"]), randn(g, p["k"], p["n"]))


@_op("matmul_small_k", "matmul", {"m": 32, "k": 2, "n": 32}, {"m": 2048, "k": 8, "n": 2048})
def _matmul_small_k(p, g):
    """Large output, short reduction (rank-k update)."""
    return _fn(torch.matmul), (randn(g, p["m"], p["k"]), randn(g, p["k"], p["n"]))


@_op("linear_nobias", "matmul", {"b": 4, "i": 32, "o": 16}, {"b": 128, "i": 1024, "o": 4096})
def _linear(p, g):
    """nn.Linear without bias (weight is a parameter)."""
    return nn.Linear(p["i"], p["o"], bias=False), (randn(g, p["b"], p["i"]),)


@_op("einsum_bhqd_bhkd", "matmul", {"b": 1, "h": 2, "s": 8, "d": 8},
     {"b": 1, "h": 16, "s": 256, "d": 64})
def _einsum(p, g):
    """einsum('bhqd,bhkd->bhqk'): contraction over the last axis of both operands."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return (_fn(lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k), "einsum"),
            (randn(g, b, h, s, d), randn(g, b, h, s, d)))


# ============================================================================ convolution
def _conv(cls, p, g, shape, **kw):
    return cls(p["cin"], p["cout"], p["k"], **kw), (randn(g, *shape),)


@_op("conv1d", "conv", {"n": 1, "cin": 4, "cout": 8, "l": 16, "k": 3},
     {"n": 8, "cin": 64, "cout": 128, "l": 512, "k": 3})
def _conv1d(p, g):
    """Conv1d, stride 1, no padding."""
    return _conv(nn.Conv1d, p, g, (p["n"], p["cin"], p["l"]))


@_op("conv1d_strided_dilated", "conv", {"n": 1, "cin": 4, "cout": 8, "l": 32, "k": 3},
     {"n": 8, "cin": 64, "cout": 64, "l": 1024, "k": 5})
def _conv1d_sd(p, g):
    """Conv1d, stride 2, dilation 2, padding 2."""
    return _conv(nn.Conv1d, p, g, (p["n"], p["cin"], p["l"]), stride=2, dilation=2, padding=2)


@_op("conv2d", "conv", {"n": 1, "cin": 4, "cout": 8, "hw": 8, "k": 3},
     {"n": 1, "cin": 64, "cout": 64, "hw": 56, "k": 3})
def _conv2d(p, g):
    """Conv2d 3x3, stride 1, padding 1 (ResNet stage-1 shape at default size)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), padding=1)


@_op("conv2d_nopad", "conv", {"n": 2, "cin": 3, "cout": 8, "hw": 10, "k": 3},
     {"n": 8, "cin": 3, "cout": 32, "hw": 128, "k": 3})
def _conv2d_nopad(p, g):
    """Conv2d 3x3, stride 1, no padding ("valid")."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]))


@_op("conv2d_strided", "conv", {"n": 1, "cin": 4, "cout": 8, "hw": 16, "k": 3},
     {"n": 1, "cin": 128, "cout": 256, "hw": 56, "k": 3})
def _conv2d_strided(p, g):
    """Conv2d 3x3, stride 2, padding 1 (downsampling)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), stride=2, padding=1)


@_op("conv2d_stem_7x7", "conv", {"n": 1, "cin": 3, "cout": 8, "hw": 32, "k": 7},
     {"n": 1, "cin": 3, "cout": 64, "hw": 224, "k": 7})
def _conv2d_stem(p, g):
    """Conv2d 7x7, stride 2, padding 3 (ResNet stem)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), stride=2, padding=3)


@_op("conv2d_padded_5x5", "conv", {"n": 1, "cin": 4, "cout": 4, "hw": 12, "k": 5},
     {"n": 4, "cin": 32, "cout": 64, "hw": 64, "k": 5})
def _conv2d_padded(p, g):
    """Conv2d 5x5 with 'same' padding 2."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), padding=2)


@_op("conv2d_asymmetric", "conv", {"n": 1, "cin": 4, "cout": 8, "hw": 12, "k": (1, 7)},
     {"n": 4, "cin": 128, "cout": 128, "hw": 17, "k": (1, 7)})
def _conv2d_asym(p, g):
    """Conv2d with a 1x7 kernel and padding (0, 3) (Inception style)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), padding=(0, 3))


@_op("conv2d_dilated", "conv", {"n": 1, "cin": 4, "cout": 8, "hw": 16, "k": 3},
     {"n": 1, "cin": 256, "cout": 256, "hw": 32, "k": 3})
def _conv2d_dilated(p, g):
    """Conv2d 3x3, dilation 2, padding 2 (atrous)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), dilation=2, padding=2)


@_op("conv2d_grouped", "conv", {"n": 1, "cin": 8, "cout": 8, "hw": 8, "k": 3, "groups": 4},
     {"n": 1, "cin": 128, "cout": 128, "hw": 56, "k": 3, "groups": 32})
def _conv2d_grouped(p, g):
    """Grouped Conv2d 3x3 (ResNeXt)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), padding=1,
                 groups=p["groups"])


@_op("conv2d_depthwise", "conv", {"n": 1, "cin": 8, "cout": 8, "hw": 8, "k": 3},
     {"n": 1, "cin": 144, "cout": 144, "hw": 56, "k": 3})
def _conv2d_dw(p, g):
    """Depthwise Conv2d 3x3 (MobileNet)."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), padding=1,
                 groups=p["cin"])


@_op("conv2d_pointwise", "conv", {"n": 1, "cin": 8, "cout": 16, "hw": 8, "k": 1},
     {"n": 1, "cin": 256, "cout": 64, "hw": 56, "k": 1})
def _conv2d_pw(p, g):
    """Pointwise (1x1) Conv2d."""
    return _conv(nn.Conv2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]))


@_op("conv3d", "conv", {"n": 1, "cin": 2, "cout": 4, "dhw": 6, "k": 3},
     {"n": 1, "cin": 32, "cout": 64, "dhw": 16, "k": 3})
def _conv3d(p, g):
    """Conv3d 3x3x3, padding 1."""
    d = p["dhw"]
    return _conv(nn.Conv3d, p, g, (p["n"], p["cin"], d, d, d), padding=1)


@_op("conv3d_strided", "conv", {"n": 1, "cin": 2, "cout": 4, "dhw": 8, "k": 3},
     {"n": 1, "cin": 64, "cout": 128, "dhw": 16, "k": 3})
def _conv3d_strided(p, g):
    """Conv3d 3x3x3, stride 2, padding 1."""
    d = p["dhw"]
    return _conv(nn.Conv3d, p, g, (p["n"], p["cin"], d, d, d), stride=2, padding=1)


@_op("conv_transpose1d", "conv", {"n": 1, "cin": 4, "cout": 4, "l": 8, "k": 4},
     {"n": 4, "cin": 128, "cout": 64, "l": 256, "k": 4})
def _convt1d(p, g):
    """ConvTranspose1d, stride 2, padding 1 (2x upsampling)."""
    return _conv(nn.ConvTranspose1d, p, g, (p["n"], p["cin"], p["l"]), stride=2, padding=1)


@_op("conv_transpose2d", "conv", {"n": 1, "cin": 4, "cout": 4, "hw": 6, "k": 3},
     {"n": 1, "cin": 64, "cout": 64, "hw": 32, "k": 3})
def _convt2d(p, g):
    """ConvTranspose2d 3x3, stride 1."""
    return _conv(nn.ConvTranspose2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]))


@_op("conv_transpose2d_strided", "conv", {"n": 1, "cin": 4, "cout": 4, "hw": 6, "k": 4},
     {"n": 1, "cin": 128, "cout": 64, "hw": 32, "k": 4})
def _convt2d_s(p, g):
    """ConvTranspose2d 4x4, stride 2, padding 1 (DCGAN / U-Net upsampling)."""
    return _conv(nn.ConvTranspose2d, p, g, (p["n"], p["cin"], p["hw"], p["hw"]), stride=2,
                 padding=1)


@_op("conv_transpose3d", "conv", {"n": 1, "cin": 2, "cout": 4, "dhw": 4, "k": 3},
     {"n": 1, "cin": 32, "cout": 32, "dhw": 16, "k": 3})
def _convt3d(p, g):
    """ConvTranspose3d 3x3x3, stride 1 (steptp's converter: TVM's importer has none for 5-D)."""
    d = p["dhw"]
    return _conv(nn.ConvTranspose3d, p, g, (p["n"], p["cin"], d, d, d))


@_op("conv_transpose3d_strided", "conv", {"n": 1, "cin": 2, "cout": 3, "dhw": 3, "k": 3},
     {"n": 1, "cin": 64, "cout": 32, "dhw": 8, "k": 3})
def _convt3d_s(p, g):
    """ConvTranspose3d 3x3x3, stride 2, padding 1, output padding 1 (3-D U-Net upsampling)."""
    d = p["dhw"]
    return _conv(nn.ConvTranspose3d, p, g, (p["n"], p["cin"], d, d, d), stride=2, padding=1,
                 output_padding=1)


# ============================================================================ pooling
def _pool(mod, shape, g):
    return mod, (randn(g, *shape),)


@_op("maxpool1d", "pool", {"n": 1, "c": 4, "l": 16}, {"n": 16, "c": 64, "l": 1024})
def _maxpool1d(p, g):
    """MaxPool1d kernel 3 stride 2 padding 1."""
    return _pool(nn.MaxPool1d(3, 2, 1), (p["n"], p["c"], p["l"]), g)


@_op("maxpool2d", "pool", {"n": 1, "c": 4, "hw": 8}, {"n": 1, "c": 64, "hw": 112})
def _maxpool2d(p, g):
    """MaxPool2d 3x3 stride 2 padding 1 (ResNet stem)."""
    return _pool(nn.MaxPool2d(3, 2, 1), (p["n"], p["c"], p["hw"], p["hw"]), g)


@_op("maxpool3d", "pool", {"n": 1, "c": 2, "dhw": 6}, {"n": 1, "c": 32, "dhw": 32})
def _maxpool3d(p, g):
    """MaxPool3d 2x2x2 stride 2."""
    d = p["dhw"]
    return _pool(nn.MaxPool3d(2, 2), (p["n"], p["c"], d, d, d), g)


@_op("avgpool1d", "pool", {"n": 1, "c": 4, "l": 16}, {"n": 16, "c": 64, "l": 1024})
def _avgpool1d(p, g):
    """AvgPool1d kernel 4 stride 2 padding 1."""
    return _pool(nn.AvgPool1d(4, 2, 1), (p["n"], p["c"], p["l"]), g)


@_op("avgpool2d", "pool", {"n": 1, "c": 4, "hw": 8}, {"n": 1, "c": 256, "hw": 56})
def _avgpool2d(p, g):
    """AvgPool2d 2x2 stride 2 (DenseNet transition)."""
    return _pool(nn.AvgPool2d(2, 2), (p["n"], p["c"], p["hw"], p["hw"]), g)


@_op("avgpool3d", "pool", {"n": 1, "c": 2, "dhw": 6}, {"n": 1, "c": 32, "dhw": 32})
def _avgpool3d(p, g):
    """AvgPool3d 3x3x3 stride 2 padding 1."""
    d = p["dhw"]
    return _pool(nn.AvgPool3d(3, 2, 1), (p["n"], p["c"], d, d, d), g)


@_op("adaptive_avgpool1d", "pool", {"n": 1, "c": 4, "l": 16}, {"n": 16, "c": 256, "l": 512})
def _aap1d(p, g):
    """AdaptiveAvgPool1d to length 4."""
    return _pool(nn.AdaptiveAvgPool1d(4), (p["n"], p["c"], p["l"]), g)


@_op("adaptive_avgpool2d", "pool", {"n": 1, "c": 4, "hw": 8}, {"n": 8, "c": 512, "hw": 14})
def _aap2d(p, g):
    """AdaptiveAvgPool2d to 7x7 (VGG/AlexNet head), tiny: to 2x2."""
    out = 2 if p["hw"] < 14 else 7
    return _pool(nn.AdaptiveAvgPool2d(out), (p["n"], p["c"], p["hw"], p["hw"]), g)


@_op("global_avgpool2d", "pool", {"n": 2, "c": 8, "hw": 8}, {"n": 8, "c": 2048, "hw": 7})
def _gap(p, g):
    """AdaptiveAvgPool2d to 1x1 (global average pooling before a classifier)."""
    return _pool(nn.AdaptiveAvgPool2d(1), (p["n"], p["c"], p["hw"], p["hw"]), g)


# ============================================================================ normalization
@_op("batchnorm2d", "norm", {"n": 2, "c": 4, "hw": 8}, {"n": 8, "c": 64, "hw": 56})
def _bn2d(p, g):
    """BatchNorm2d in eval mode (running statistics)."""
    m = nn.BatchNorm2d(p["c"])
    with torch.no_grad():
        m.running_mean.copy_(randn(g, p["c"]) * 0.1)
        m.running_var.copy_(rand(g, p["c"], low=0.5, high=1.5))
    return m, (randn(g, p["n"], p["c"], p["hw"], p["hw"]),)


@_op("batchnorm1d", "norm", {"n": 4, "c": 8}, {"n": 256, "c": 1024})
def _bn1d(p, g):
    """BatchNorm1d in eval mode on (n, c)."""
    m = nn.BatchNorm1d(p["c"])
    with torch.no_grad():
        m.running_mean.copy_(randn(g, p["c"]) * 0.1)
        m.running_var.copy_(rand(g, p["c"], low=0.5, high=1.5))
    return m, (randn(g, p["n"], p["c"]),)


@_op("layernorm", "norm", {"b": 2, "s": 8, "d": 32}, {"b": 4, "s": 128, "d": 768})
def _ln(p, g):
    """LayerNorm over the last dimension (transformer hidden states)."""
    return nn.LayerNorm(p["d"]), (randn(g, p["b"], p["s"], p["d"]),)


@_op("layernorm_2d", "norm", {"n": 2, "c": 4, "hw": 6}, {"n": 8, "c": 64, "hw": 32})
def _ln2d(p, g):
    """LayerNorm over the last three dimensions (c, h, w)."""
    c, hw = p["c"], p["hw"]
    return nn.LayerNorm([c, hw, hw]), (randn(g, p["n"], c, hw, hw),)


@_op("groupnorm", "norm", {"n": 2, "c": 8, "hw": 6, "groups": 2},
     {"n": 2, "c": 320, "hw": 32, "groups": 32})
def _gn(p, g):
    """GroupNorm (diffusion U-Net shape at default size)."""
    return nn.GroupNorm(p["groups"], p["c"]), (randn(g, p["n"], p["c"], p["hw"], p["hw"]),)


@_op("instancenorm2d", "norm", {"n": 2, "c": 4, "hw": 8}, {"n": 4, "c": 64, "hw": 128})
def _in2d(p, g):
    """InstanceNorm2d (style transfer), affine."""
    return nn.InstanceNorm2d(p["c"], affine=True), (randn(g, p["n"], p["c"], p["hw"], p["hw"]),)


class RMSNorm(nn.Module):
    """RMSNorm written out (Llama style): x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


@_op("rmsnorm", "norm", {"b": 2, "s": 8, "d": 32}, {"b": 4, "s": 128, "d": 4096})
def _rms(p, g):
    """RMSNorm over the last dimension (Llama)."""
    m = RMSNorm(p["d"])
    with torch.no_grad():
        m.weight.copy_(1 + 0.1 * randn(g, p["d"]))
    return m, (randn(g, p["b"], p["s"], p["d"]),)


@_op("l1_normalize", "norm", {"b": 4, "d": 32}, {"b": 256, "d": 4096})
def _l1(p, g):
    """x / sum(|x|) along the last dimension."""
    return (_fn(lambda x: x / torch.sum(torch.abs(x), dim=-1, keepdim=True), "l1"),
            (randn(g, p["b"], p["d"]),))


@_op("l2_normalize", "norm", {"b": 4, "d": 32}, {"b": 256, "d": 4096})
def _l2(p, g):
    """F.normalize(x, p=2, dim=-1)."""
    return _fn(lambda x: F.normalize(x, p=2.0, dim=-1), "l2"), (randn(g, p["b"], p["d"]),)


@_op("frobenius_normalize", "norm", {"b": 2, "c": 4, "hw": 8}, {"b": 16, "c": 64, "hw": 64})
def _fro(p, g):
    """x / ||x||_F over the whole tensor."""
    return (_fn(lambda x: x / torch.sqrt(torch.sum(x * x)), "frobenius"),
            (randn(g, p["b"], p["c"], p["hw"], p["hw"]),))


# ============================================================================ activations
_ACT_TINY = {"b": 4, "d": 64}
_ACT_DEFAULT = {"b": 256, "d": 16384}


def _act(name: str, fn, doc: str, dtypes=None):
    def factory(p, g):
        return fn(), (randn(g, p["b"], p["d"]) * 3.0,)
    factory.__doc__ = doc
    _op(name, "activation", _ACT_TINY, _ACT_DEFAULT, dtypes=dtypes)(factory)


_act("relu", nn.ReLU, "ReLU.")
_act("leaky_relu", lambda: nn.LeakyReLU(0.01), "LeakyReLU(0.01).")
_act("relu6", nn.ReLU6, "ReLU6 (clamp to [0, 6]).")
_act("prelu", lambda: nn.PReLU(), "PReLU with one learned slope.")
_act("elu", nn.ELU, "ELU(alpha=1).")
class SELU(nn.Module):
    """SELU written as scale * elu(x, alpha). (torch.export turns nn.SELU into
    aten.elu(x, alpha, scale) and TVM 0.27's elu converter drops the scale argument.)"""

    def forward(self, x):
        return 1.0507009873554804934193349852946 * F.elu(x, alpha=1.6732632423543772848170429916717)


_act("selu", SELU, "SELU (as scale * elu(x, alpha); TVM 0.27 drops elu's scale argument).")
_act("celu", lambda: nn.CELU(1.0), "CELU(alpha=1).")
_act("gelu", nn.GELU, "GELU, exact (erf).")
_act("gelu_tanh", lambda: nn.GELU(approximate="tanh"), "GELU, tanh approximation.")
_act("silu", nn.SiLU, "SiLU / swish.")
_act("mish", nn.Mish, "Mish: x * tanh(softplus(x)).")
_act("softplus", nn.Softplus, "Softplus(beta=1, threshold=20).")
_act("softsign", nn.Softsign, "Softsign: x / (1 + |x|).")
_act("sigmoid", nn.Sigmoid, "Sigmoid.")
_act("tanh", nn.Tanh, "Tanh.")
_act("hardsigmoid", nn.Hardsigmoid, "Hardsigmoid.")
_act("hardswish", nn.Hardswish, "Hardswish (MobileNetV3).")
_act("hardtanh", nn.Hardtanh, "Hardtanh (clamp to [-1, 1]).")


# ============================================================================ softmax family
@_op("softmax", "softmax", {"b": 4, "d": 64}, {"b": 256, "d": 16384})
def _softmax(p, g):
    """Softmax over the last dimension."""
    return nn.Softmax(dim=-1), (randn(g, p["b"], p["d"]),)


@_op("softmax_dim1_4d", "softmax", {"b": 1, "c": 8, "hw": 4}, {"b": 8, "c": 1000, "hw": 16})
def _softmax_dim1(p, g):
    """Softmax over dim 1 of an NCHW tensor (a non-innermost reduction)."""
    return nn.Softmax(dim=1), (randn(g, p["b"], p["c"], p["hw"], p["hw"]),)


@_op("log_softmax", "softmax", {"b": 4, "d": 64}, {"b": 256, "d": 16384})
def _log_softmax(p, g):
    """LogSoftmax over the last dimension."""
    return nn.LogSoftmax(dim=-1), (randn(g, p["b"], p["d"]),)


def _rowmax(x):
    """max over the last dimension, keepdim. TVM 0.27's importer has no converter for
    ``aten.amax`` and maps ``max.dim`` to ``topk``; a max-pool whose window spans the whole last
    dimension imports as a plain max reduction."""
    shape = x.shape
    return F.max_pool1d(x.reshape(-1, 1, shape[-1]), kernel_size=shape[-1]).reshape(
        *shape[:-1], 1)


class LogSumExp(nn.Module):
    """logsumexp over the last dim, written out stably: m + log(sum(exp(x - m)))."""

    def forward(self, x):
        m = _rowmax(x)
        return (m + torch.log(torch.sum(torch.exp(x - m), dim=-1, keepdim=True))).squeeze(-1)


@_op("logsumexp", "softmax", {"b": 4, "d": 64}, {"b": 256, "d": 16384})
def _lse(p, g):
    """logsumexp over the last dimension (stable max-subtracted form)."""
    return LogSumExp(), (randn(g, p["b"], p["d"]),)


# ============================================================================ reductions
_RED_TINY = {"b": 4, "m": 8, "n": 16}
_RED_DEFAULT = {"b": 16, "m": 256, "n": 256}


def _red(name: str, fn, doc: str, dtypes=None):
    def factory(p, g):
        return _fn(fn, name), (randn(g, p["b"], p["m"], p["n"]),)
    factory.__doc__ = doc
    _op(name, "reduction", _RED_TINY, _RED_DEFAULT, dtypes=dtypes)(factory)


_red("sum_dim", lambda x: torch.sum(x, dim=1), "Sum over dim 1 of (b, m, n).")
_red("sum_all", lambda x: torch.sum(x), "Sum of every element.")
_red("mean_dim", lambda x: torch.mean(x, dim=-1, keepdim=True), "Mean over the last dim.")
_red("max_dim", lambda x: _rowmax(x).squeeze(-1),
     "Max over the last dim (as a full-width max-pool; aten.amax has no TVM converter).")
_red("min_dim", lambda x: -_rowmax(-x).squeeze(-1),
     "Min over the last dim (-max(-x), as a full-width max-pool).")
_red("max_all", lambda x: torch.max(x), "Max of every element.")
_red("min_all", lambda x: torch.min(x), "Min of every element.")
_red("prod_all", lambda x: torch.prod(1.0 + 0.001 * x),
     "Product of every element (of 1 + 0.001 x, to stay finite; prod over one dim has no TVM "
     "converter).")
_red("argmax_dim", lambda x: torch.argmax(x, dim=1), "Argmax over dim 1 (int64 result).")
_red("argmin_dim", lambda x: torch.argmin(x, dim=-1), "Argmin over the last dim (int64 result).")
_red("var_dim", lambda x: torch.var(x, dim=-1), "Unbiased variance over the last dim.")
# steptp's own converters (steptp.zoo.converters): values and indices as two reductions
_red("max_dim_indices", lambda x: torch.max(x, dim=-1),
     "torch.max over the last dim: values and int64 indices (max + argmax).", dtypes=("float32",))
_red("min_dim_indices_keepdim", lambda x: torch.min(x, dim=1, keepdim=True),
     "torch.min over dim 1 with keepdim: values and int64 indices (min + argmin).",
     dtypes=("float32",))
_red("topk_1", lambda x: torch.topk(x, 1, dim=-1),
     "topk with k = 1 over the last dim: values and indices (max + argmax, no sort).",
     dtypes=("float32",))
_red("amax_dim", lambda x: torch.amax(x, dim=-1), "aten.amax over the last dim.")
_red("amin_dims", lambda x: torch.amin(x, dim=(1, 2), keepdim=True),
     "aten.amin over two dims with keepdim.")
_red("prod_dim", lambda x: torch.prod(1.0 + 0.01 * x, dim=1),
     "Product over dim 1 (aten.prod.dim_int) of 1 + 0.01 x.")
_red("var_mean_dim", lambda x: torch.var_mean(x, dim=-1),
     "torch.var_mean over the last dim (unbiased variance and mean).")
_red("logsumexp_dim", lambda x: torch.logsumexp(x, dim=-1),
     "torch.logsumexp over the last dim (decomposes to amax, exp, sum, log).")


# ============================================================================ scans
@_op("cumsum", "scan", {"b": 4, "d": 32}, {"b": 128, "d": 4096})
def _cumsum(p, g):
    """Inclusive prefix sum over the last dimension."""
    return _fn(lambda x: torch.cumsum(x, dim=-1), "cumsum"), (randn(g, p["b"], p["d"]),)


@_op("cumsum_dim0", "scan", {"b": 16, "d": 8}, {"b": 4096, "d": 128})
def _cumsum0(p, g):
    """Inclusive prefix sum over dim 0 (strided scan)."""
    return _fn(lambda x: torch.cumsum(x, dim=0), "cumsum0"), (randn(g, p["b"], p["d"]),)


@_op("cumprod", "scan", {"b": 4, "d": 32}, {"b": 128, "d": 4096})
def _cumprod(p, g):
    """Inclusive prefix product over the last dimension (of values near 1)."""
    return (_fn(lambda x: torch.cumprod(x, dim=-1), "cumprod"),
            (rand(g, p["b"], p["d"], low=0.9, high=1.1),))


@_op("cumsum_reverse", "scan", {"b": 4, "d": 32}, {"b": 128, "d": 4096})
def _cumsum_rev(p, g):
    """Reverse (suffix) sum: flip, cumsum, flip."""
    return (_fn(lambda x: torch.flip(torch.cumsum(torch.flip(x, [-1]), dim=-1), [-1]), "rcumsum"),
            (randn(g, p["b"], p["d"]),))


# ============================================================================ indexing (steptp converters)
@_op("scatter_add", "indexing", {"b": 4, "n": 16, "k": 5}, {"b": 256, "n": 4096, "k": 512},
     dtypes=("float32",))
def _scatter_add(p, g):
    """x.scatter_add(1, index, src): sums src into x at data-dependent columns."""
    return (_fn(lambda x, i, s: x.scatter_add(1, i, s), "scatter_add"),
            (randn(g, p["b"], p["n"]), randint(g, p["n"], p["b"], p["k"]),
             randn(g, p["b"], p["k"])))


@_op("index_put_rows", "indexing", {"n": 16, "d": 8, "k": 4}, {"n": 4096, "d": 512, "k": 256},
     dtypes=("float32",))
def _index_put_rows(p, g):
    """x.index_put((rows,), v, accumulate=True): whole rows accumulated at given indices."""
    return (_fn(lambda x, i, v: x.index_put((i,), v, accumulate=True), "index_put_rows"),
            (randn(g, p["n"], p["d"]), randint(g, p["n"], p["k"]), randn(g, p["k"], p["d"])))


@_op("unfold_windows", "indexing", {"b": 2, "l": 16, "w": 4, "s": 2},
     {"b": 64, "l": 4096, "w": 64, "s": 32})
def _unfold_windows(p, g):
    """Tensor.unfold(1, w, s): overlapping windows, then their sums (a strided moving sum)."""
    return (_fn(lambda x: x.unfold(1, p["w"], p["s"]).sum(-1), "unfold_windows"),
            (randn(g, p["b"], p["l"]),))


@_op("cdist", "indexing", {"m": 6, "n": 5, "d": 3}, {"m": 512, "n": 512, "d": 64})
def _cdist(p, g):
    """torch.cdist (p = 2): pairwise Euclidean distances."""
    return (_fn(lambda a, b: torch.cdist(a, b), "cdist"),
            (randn(g, p["m"], p["d"]), randn(g, p["n"], p["d"])))


@_op("cummax", "scan", {"b": 4, "d": 32}, {"b": 128, "d": 4096}, dtypes=("float32",),
     meta={"lowering": "steptp.zoo.converters (sequential scan kernel)"})
def _cummax(p, g):
    """torch.cummax over the last dim: running max and the (latest) index of it."""
    return _fn(lambda x: torch.cummax(x, dim=-1), "cummax"), (randn(g, p["b"], p["d"]),)


@_op("logcumsumexp", "scan", {"b": 4, "d": 32}, {"b": 128, "d": 4096}, dtypes=("float32",),
     meta={"lowering": "steptp.zoo.converters (sequential scan kernel)"})
def _logcumsumexp(p, g):
    """torch.logcumsumexp over the last dim (a stable running log-add-exp)."""
    return _fn(lambda x: torch.logcumsumexp(x, dim=-1), "logcumsumexp"), (randn(g, p["b"], p["d"]),)


# ============================================================================ losses
# Losses take (prediction, target) and reduce to a scalar (reduction="mean" unless noted).
_LOSS_TINY = {"b": 8, "d": 16}
_LOSS_DEFAULT = {"b": 512, "d": 4096}


@_op("mse_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _mse(p, g):
    """Mean squared error."""
    return nn.MSELoss(), (randn(g, p["b"], p["d"]), randn(g, p["b"], p["d"]))


@_op("l1_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _l1loss(p, g):
    """Mean absolute error."""
    return nn.L1Loss(), (randn(g, p["b"], p["d"]), randn(g, p["b"], p["d"]))


@_op("huber_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _huber(p, g):
    """Huber loss, delta 1 (== smooth L1)."""
    return nn.HuberLoss(delta=1.0), (randn(g, p["b"], p["d"]), randn(g, p["b"], p["d"]))


@_op("smooth_l1_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _smoothl1(p, g):
    """Smooth L1 loss, beta 0.5."""
    return nn.SmoothL1Loss(beta=0.5), (randn(g, p["b"], p["d"]), randn(g, p["b"], p["d"]))


@_op("cross_entropy_loss", "loss", {"b": 8, "c": 10}, {"b": 1024, "c": 1000})
def _ce(p, g):
    """Cross entropy of logits (b, c) against int64 class labels."""
    return nn.CrossEntropyLoss(), (randn(g, p["b"], p["c"]), randint(g, p["c"], p["b"]))


@_op("nll_loss", "loss", {"b": 8, "c": 10}, {"b": 1024, "c": 1000})
def _nll(p, g):
    """NLL of log-probabilities (b, c) against int64 class labels."""
    return nn.NLLLoss(), (torch.log_softmax(randn(g, p["b"], p["c"]), -1),
                          randint(g, p["c"], p["b"]))


@_op("kl_div_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _kl(p, g):
    """KL divergence, reduction batchmean, of log-probabilities against probabilities."""
    lp = torch.log_softmax(randn(g, p["b"], p["d"]), -1)
    q = torch.softmax(randn(g, p["b"], p["d"]), -1)
    return nn.KLDivLoss(reduction="batchmean"), (lp, q)


@_op("bce_with_logits_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _bce(p, g):
    """Binary cross entropy with logits against {0, 1} float targets."""
    return nn.BCEWithLogitsLoss(), (randn(g, p["b"], p["d"]),
                                    randint(g, 2, p["b"], p["d"]).float())


class HingeLoss(nn.Module):
    """mean(clamp(1 - pred * target, min=0)) with targets in {-1, +1} (KernelBench style)."""

    def forward(self, pred, target):
        return torch.mean(torch.clamp(1 - pred * target, min=0))


@_op("hinge_loss", "loss", {"b": 16}, {"b": 65536})
def _hinge(p, g):
    """Hinge loss with +-1 targets."""
    return HingeLoss(), (randn(g, p["b"]), randint(g, 2, p["b"]).float() * 2 - 1)


class CosineLoss(nn.Module):
    """mean(1 - cosine_similarity(pred, target)) along the last dimension."""

    def forward(self, pred, target):
        return torch.mean(1 - F.cosine_similarity(pred, target, dim=-1))


@_op("cosine_similarity_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _cos(p, g):
    """1 - cosine similarity, averaged."""
    return CosineLoss(), (randn(g, p["b"], p["d"]), randn(g, p["b"], p["d"]))


@_op("triplet_margin_loss", "loss", _LOSS_TINY, _LOSS_DEFAULT)
def _triplet(p, g):
    """TripletMarginLoss(margin=1, p=2) on (anchor, positive, negative)."""
    b, d = p["b"], p["d"]
    return nn.TripletMarginLoss(margin=1.0), (randn(g, b, d), randn(g, b, d), randn(g, b, d))


# ============================================================================ attention
@_op("sdpa", "attention", {"b": 1, "h": 2, "s": 8, "d": 8}, {"b": 1, "h": 12, "s": 256, "d": 64})
def _sdpa(p, g):
    """F.scaled_dot_product_attention, no mask."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return (_fn(F.scaled_dot_product_attention, "sdpa"),
            tuple(randn(g, b, h, s, d) for _ in range(3)))


@_op("sdpa_causal", "attention", {"b": 1, "h": 2, "s": 8, "d": 8},
     {"b": 1, "h": 32, "s": 256, "d": 128})
def _sdpa_causal(p, g):
    """F.scaled_dot_product_attention with is_causal=True."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return (_fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), "causal"),
            tuple(randn(g, b, h, s, d) for _ in range(3)))


def _repeat_kv(x, n):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


class GroupedQueryAttention(nn.Module):
    """Attention with fewer key/value heads than query heads (kv heads repeated)."""

    def __init__(self, causal: bool = True) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        n = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, _repeat_kv(k, n), _repeat_kv(v, n),
                                              is_causal=self.causal)


@_op("attention_mqa", "attention", {"b": 1, "h": 4, "s": 8, "d": 8},
     {"b": 1, "h": 16, "s": 256, "d": 64})
def _mqa(p, g):
    """Multi-query attention: h query heads share one key/value head (causal)."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return GroupedQueryAttention(), (randn(g, b, h, s, d), randn(g, b, 1, s, d),
                                     randn(g, b, 1, s, d))


@_op("attention_gqa", "attention", {"b": 1, "h": 4, "kv": 2, "s": 8, "d": 8},
     {"b": 1, "h": 32, "kv": 8, "s": 256, "d": 128})
def _gqa(p, g):
    """Grouped-query attention: h query heads, kv key/value heads (causal; Llama-3/Mistral)."""
    b, h, kv, s, d = p["b"], p["h"], p["kv"], p["s"], p["d"]
    return GroupedQueryAttention(), (randn(g, b, h, s, d), randn(g, b, kv, s, d),
                                     randn(g, b, kv, s, d))


@_op("attention_decode", "attention", {"b": 1, "h": 2, "s": 16, "d": 8},
     {"b": 4, "h": 32, "s": 1024, "d": 128})
def _attn_decode(p, g):
    """One query token attending to s cached keys/values (decode step)."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return (_fn(F.scaled_dot_product_attention, "decode"),
            (randn(g, b, h, 1, d), randn(g, b, h, s, d), randn(g, b, h, s, d)))
