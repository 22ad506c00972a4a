"""The fused suite: short operator chains as they appear inside networks (what TVM's FuseOps turns
into one kernel, or a handful: GEMM + bias + activation, conv + batch norm + ReLU, attention
blocks, MLPs, residual blocks, ...).

Factories follow the ``ops`` convention: ``(p, g) -> (module, inputs)`` in float32.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from steptp.zoo._base import Workload, randint, randn, supported_dtypes
from steptp.zoo.ops import RMSNorm, _repeat_kv, _rowmax

WORKLOADS: list[Workload] = []


def _fused(name: str, family: str, tiny: dict[str, Any], default: dict[str, Any],
           dtypes: tuple[str, ...] | None = None, description: str = ""):
    def deco(factory):
        WORKLOADS.append(Workload(name=name, suite="fused", family=family, factory=factory,
                                  sizes={"tiny": tiny, "default": default},
                                  dtypes=dtypes or supported_dtypes(name),
                                  description=description or (factory.__doc__ or "").strip()))
        return factory
    return deco


def _init_bn(bn: nn.Module, g: torch.Generator) -> nn.Module:
    """Non-trivial running statistics and affine parameters for an eval-mode batch norm."""
    c = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(0.1 * randn(g, c))
        bn.running_var.copy_(0.5 + torch.rand(c, generator=g))
        bn.weight.copy_(1 + 0.1 * randn(g, c))
        bn.bias.copy_(0.1 * randn(g, c))
    return bn


# ============================================================================ GEMM epilogues
_GEMM_TINY = {"b": 4, "i": 32, "o": 16}
_GEMM_DEFAULT = {"b": 128, "i": 1024, "o": 1024}


class LinearAct(nn.Module):
    """y = act(x @ W.T + b)."""

    def __init__(self, i: int, o: int, act) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o)
        self.act = act

    def forward(self, x):
        return self.act(self.linear(x))


def _gemm(name: str, act, doc: str, tiny=_GEMM_TINY, default=_GEMM_DEFAULT):
    def factory(p, g):
        return LinearAct(p["i"], p["o"], act), (randn(g, p["b"], p["i"]),)
    factory.__doc__ = doc
    _fused(name, "gemm_epilogue", tiny, default)(factory)


_gemm("gemm_bias", nn.Identity(), "Linear with bias (GEMM + bias add).")
_gemm("gemm_bias_relu", nn.ReLU(), "Linear + bias + ReLU.")
_gemm("gemm_bias_gelu", nn.GELU(), "Linear + bias + exact GELU (BERT FFN up-projection).",
      default={"b": 128, "i": 768, "o": 3072})
_gemm("gemm_bias_gelu_tanh", nn.GELU(approximate="tanh"),
      "Linear + bias + tanh-GELU (GPT-2 MLP).", default={"b": 128, "i": 768, "o": 3072})
_gemm("gemm_bias_silu", nn.SiLU(), "Linear + bias + SiLU.")
_gemm("gemm_bias_sigmoid", nn.Sigmoid(), "Linear + bias + sigmoid (gating).")
_gemm("gemm_bias_tanh", nn.Tanh(), "Linear + bias + tanh (BERT pooler).",
      default={"b": 64, "i": 768, "o": 768})


class GemmScaleResidual(nn.Module):
    """y = (x @ W.T + b) * scale + residual."""

    def __init__(self, i: int, o: int, scale: float = 0.5) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o)
        self.scale = scale

    def forward(self, x, res):
        return self.linear(x) * self.scale + res


@_fused("gemm_scale_residual", "gemm_epilogue", _GEMM_TINY, _GEMM_DEFAULT)
def _gemm_scale_res(p, g):
    """Linear, scale, residual add."""
    return GemmScaleResidual(p["i"], p["o"]), (randn(g, p["b"], p["i"]), randn(g, p["b"], p["o"]))


class GemmDropoutMeanSoftmax(nn.Module):
    """KernelBench-style chain: linear, divide, sum over features, scale."""

    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o)

    def forward(self, x):
        y = self.linear(x) / 2.0
        return torch.sum(y, dim=1, keepdim=True) * 1.5


@_fused("gemm_divide_sum_scale", "gemm_epilogue", _GEMM_TINY, _GEMM_DEFAULT)
def _gemm_div_sum(p, g):
    """Linear, divide by a constant, sum over features, scale."""
    return GemmDropoutMeanSoftmax(p["i"], p["o"]), (randn(g, p["b"], p["i"]),)


class GemmMaxSubGelu(nn.Module):
    """Linear, row max (keepdim), subtract the row mean, GELU."""

    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o)

    def forward(self, x):
        y = self.linear(x)
        y = y - _rowmax(y)
        return F.gelu(y - y.mean(dim=1, keepdim=True))


@_fused("gemm_rowmax_sub_gelu", "gemm_epilogue", _GEMM_TINY, _GEMM_DEFAULT)
def _gemm_max_sub(p, g):
    """Linear, subtract the row max and row mean, GELU."""
    return GemmMaxSubGelu(p["i"], p["o"]), (randn(g, p["b"], p["i"]),)


class BatchedGemmBiasRelu(nn.Module):
    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o)

    def forward(self, x):
        return torch.relu(self.linear(x))


@_fused("gemm3d_bias_relu", "gemm_epilogue", {"b": 2, "s": 8, "i": 32, "o": 16},
        {"b": 4, "s": 128, "i": 768, "o": 768})
def _gemm3d(p, g):
    """Linear + bias + ReLU on a (b, s, d) activation."""
    return BatchedGemmBiasRelu(p["i"], p["o"]), (randn(g, p["b"], p["s"], p["i"]),)


class LinearSoftmax(nn.Module):
    """Classifier head: linear then softmax over classes."""

    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o)

    def forward(self, x):
        return torch.softmax(self.linear(x), dim=-1)


@_fused("linear_softmax", "softmax_chain", {"b": 4, "i": 32, "o": 10},
        {"b": 64, "i": 2048, "o": 1000})
def _linear_softmax(p, g):
    """Linear classifier + softmax (ResNet head)."""
    return LinearSoftmax(p["i"], p["o"]), (randn(g, p["b"], p["i"]),)


class LinearCrossEntropy(nn.Module):
    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.linear = nn.Linear(i, o, bias=False)

    def forward(self, x, labels):
        return F.cross_entropy(self.linear(x), labels)


@_fused("linear_cross_entropy", "softmax_chain", {"b": 8, "i": 32, "o": 64},
        {"b": 512, "i": 768, "o": 8192})
def _linear_ce(p, g):
    """LM head + cross entropy against labels (training loss)."""
    return (LinearCrossEntropy(p["i"], p["o"]),
            (randn(g, p["b"], p["i"]), randint(g, p["o"], p["b"])))


class MatmulSoftmax(nn.Module):
    """softmax(A @ B * scale)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.softmax(torch.matmul(a, b) * self.scale, dim=-1)


@_fused("matmul_scale_softmax", "softmax_chain", {"b": 1, "h": 2, "s": 8, "d": 8},
        {"b": 1, "h": 12, "s": 256, "d": 64})
def _matmul_softmax(p, g):
    """Attention scores: softmax(Q @ K^T / sqrt(d))."""
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    return MatmulSoftmax(1 / math.sqrt(d)), (randn(g, b, h, s, d), randn(g, b, h, d, s))


class MaskedSoftmax(nn.Module):
    """softmax(scores * scale + mask) with an additive attention mask."""

    def forward(self, scores, mask):
        return torch.softmax(scores * 0.125 + mask, dim=-1)


@_fused("scale_mask_softmax", "softmax_chain", {"b": 1, "h": 2, "s": 8},
        {"b": 4, "h": 12, "s": 512})
def _mask_softmax(p, g):
    """Scale + additive mask + softmax (BERT attention probabilities)."""
    b, h, s = p["b"], p["h"], p["s"]
    mask = torch.where(torch.rand(b, 1, 1, s, generator=g) < 0.2, -10000.0, 0.0)
    return MaskedSoftmax(), (randn(g, b, h, s, s), mask)


# ============================================================================ convolution chains
class ConvBNAct(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                 act=None, bias: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=bias)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act if act is not None else nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


def _conv_inputs(p, g):
    return (randn(g, p["n"], p["cin"], p["hw"], p["hw"]),)


_CONV_TINY = {"n": 1, "cin": 4, "cout": 8, "hw": 8}
_CONV_DEFAULT = {"n": 1, "cin": 64, "cout": 64, "hw": 56}


@_fused("conv2d_bn_relu", "conv_chain", _CONV_TINY, _CONV_DEFAULT)
def _conv_bn_relu(p, g):
    """Conv2d 3x3 + BatchNorm (eval) + ReLU (ResNet)."""
    m = ConvBNAct(p["cin"], p["cout"], 3)
    _init_bn(m.bn, g)
    return m, _conv_inputs(p, g)


@_fused("conv2d_bn_relu6_strided", "conv_chain", _CONV_TINY,
        {"n": 1, "cin": 32, "cout": 64, "hw": 112})
def _conv_bn_relu6(p, g):
    """Conv2d 3x3 stride 2 + BatchNorm + ReLU6 (MobileNetV2 stem)."""
    m = ConvBNAct(p["cin"], p["cout"], 3, stride=2, act=nn.ReLU6())
    _init_bn(m.bn, g)
    return m, _conv_inputs(p, g)


@_fused("conv2d_bias_relu", "conv_chain", _CONV_TINY, _CONV_DEFAULT)
def _conv_bias_relu(p, g):
    """Conv2d 3x3 with bias + ReLU (VGG)."""
    return nn.Sequential(nn.Conv2d(p["cin"], p["cout"], 3, padding=1), nn.ReLU()), \
        _conv_inputs(p, g)


@_fused("conv2d_gelu", "conv_chain", _CONV_TINY, _CONV_DEFAULT)
def _conv_gelu(p, g):
    """Conv2d 3x3 with bias + GELU."""
    return nn.Sequential(nn.Conv2d(p["cin"], p["cout"], 3, padding=1), nn.GELU()), \
        _conv_inputs(p, g)


class ConvResidual(nn.Module):
    """relu(conv(x) + x)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x) + x)


@_fused("conv2d_residual_add_relu", "conv_chain", {"n": 1, "cin": 8, "hw": 8},
        {"n": 1, "cin": 64, "hw": 56})
def _conv_res(p, g):
    """Conv2d 3x3 + residual add + ReLU."""
    return ConvResidual(p["cin"]), _conv_inputs(p, g)


@_fused("conv2d_relu_maxpool", "conv_chain", _CONV_TINY, {"n": 1, "cin": 64, "cout": 128,
                                                          "hw": 112})
def _conv_relu_pool(p, g):
    """Conv2d 3x3 + ReLU + MaxPool 2x2 (VGG block)."""
    return nn.Sequential(nn.Conv2d(p["cin"], p["cout"], 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2)), _conv_inputs(p, g)


class ConvAvgPoolSigmoidSum(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        y = torch.sigmoid(F.avg_pool2d(self.conv(x), 2))
        return torch.sum(y, dim=(1, 2, 3))


@_fused("conv2d_avgpool_sigmoid_sum", "conv_chain", _CONV_TINY,
        {"n": 16, "cin": 3, "cout": 16, "hw": 64})
def _conv_avg_sig(p, g):
    """Conv2d + AvgPool + sigmoid + sum (KernelBench level-2 style)."""
    return ConvAvgPoolSigmoidSum(p["cin"], p["cout"]), _conv_inputs(p, g)


class ConvGroupNormSiLU(nn.Module):
    """Diffusion U-Net ResBlock prologue: GroupNorm, SiLU, Conv2d."""

    def __init__(self, cin: int, cout: int, groups: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, cin)
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return self.conv(F.silu(self.norm(x)))


@_fused("groupnorm_silu_conv2d", "conv_chain", {"n": 1, "cin": 8, "cout": 8, "hw": 8, "groups": 2},
        {"n": 1, "cin": 320, "cout": 320, "hw": 32, "groups": 32})
def _gn_silu_conv(p, g):
    """GroupNorm + SiLU + Conv2d 3x3 (Stable Diffusion ResBlock)."""
    return ConvGroupNormSiLU(p["cin"], p["cout"], p["groups"]), _conv_inputs(p, g)


class DepthwiseSeparable(nn.Module):
    """MobileNetV1 block: depthwise 3x3 + BN + ReLU, pointwise 1x1 + BN + ReLU."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.dw = ConvBNAct(cin, cin, 3, groups=cin)
        self.pw = ConvBNAct(cin, cout, 1)

    def forward(self, x):
        return self.pw(self.dw(x))


@_fused("depthwise_separable_block", "conv_chain", _CONV_TINY,
        {"n": 1, "cin": 128, "cout": 256, "hw": 56})
def _dws(p, g):
    """Depthwise separable convolution block (MobileNetV1)."""
    m = DepthwiseSeparable(p["cin"], p["cout"])
    _init_bn(m.dw.bn, g)
    _init_bn(m.pw.bn, g)
    return m, _conv_inputs(p, g)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: expand 1x1, depthwise 3x3, project 1x1, residual."""

    def __init__(self, c: int, expand: int) -> None:
        super().__init__()
        h = c * expand
        self.expand = ConvBNAct(c, h, 1, act=nn.ReLU6())
        self.dw = ConvBNAct(h, h, 3, groups=h, act=nn.ReLU6())
        self.project = ConvBNAct(h, c, 1, act=nn.Identity())

    def forward(self, x):
        return x + self.project(self.dw(self.expand(x)))


@_fused("inverted_residual_block", "conv_chain", {"n": 1, "cin": 4, "hw": 8, "expand": 4},
        {"n": 1, "cin": 32, "hw": 28, "expand": 6})
def _invres(p, g):
    """MobileNetV2 inverted residual block."""
    m = InvertedResidual(p["cin"], p["expand"])
    for bn in (m.expand.bn, m.dw.bn, m.project.bn):
        _init_bn(bn, g)
    return m, _conv_inputs(p, g)


class BasicBlock(nn.Module):
    """ResNet-18/34 basic block."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = ConvBNAct(c, c, 3)
        self.c2 = ConvBNAct(c, c, 3, act=nn.Identity())

    def forward(self, x):
        return torch.relu(x + self.c2(self.c1(x)))


@_fused("resnet_basic_block", "residual_block", {"n": 1, "cin": 8, "hw": 8},
        {"n": 1, "cin": 64, "hw": 56})
def _basic(p, g):
    """ResNet basic block (two conv-bn, residual, ReLU)."""
    m = BasicBlock(p["cin"])
    _init_bn(m.c1.bn, g)
    _init_bn(m.c2.bn, g)
    return m, _conv_inputs(p, g)


class Bottleneck(nn.Module):
    """ResNet-50 bottleneck block (1x1 reduce, 3x3, 1x1 expand, residual)."""

    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.c1 = ConvBNAct(c, mid, 1)
        self.c2 = ConvBNAct(mid, mid, 3)
        self.c3 = ConvBNAct(mid, c, 1, act=nn.Identity())

    def forward(self, x):
        return torch.relu(x + self.c3(self.c2(self.c1(x))))


@_fused("resnet_bottleneck_block", "residual_block", {"n": 1, "cin": 16, "mid": 4, "hw": 8},
        {"n": 1, "cin": 256, "mid": 64, "hw": 56})
def _bottleneck(p, g):
    """ResNet-50 bottleneck block."""
    m = Bottleneck(p["cin"], p["mid"])
    for blk in (m.c1, m.c2, m.c3):
        _init_bn(blk.bn, g)
    return m, _conv_inputs(p, g)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt block: depthwise 7x7, LayerNorm (channels last), MLP x4 with GELU, residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


@_fused("convnext_block", "residual_block", {"n": 1, "cin": 8, "hw": 8},
        {"n": 1, "cin": 96, "hw": 56})
def _convnext(p, g):
    """ConvNeXt block."""
    return ConvNeXtBlock(p["cin"]), _conv_inputs(p, g)


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: global pool, FC-ReLU-FC-sigmoid, channel scale."""

    def __init__(self, c: int, r: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))


@_fused("squeeze_excite", "conv_chain", {"n": 1, "cin": 8, "hw": 8},
        {"n": 1, "cin": 256, "hw": 28})
def _se(p, g):
    """Squeeze-and-excitation block (EfficientNet)."""
    return SqueezeExcite(p["cin"]), _conv_inputs(p, g)


@_fused("conv_transpose2d_bias_relu", "conv_chain", _CONV_TINY,
        {"n": 1, "cin": 128, "cout": 64, "hw": 32})
def _convt_relu(p, g):
    """ConvTranspose2d 4x4 stride 2 + bias + ReLU (decoder upsampling)."""
    return nn.Sequential(nn.ConvTranspose2d(p["cin"], p["cout"], 4, 2, 1), nn.ReLU()), \
        _conv_inputs(p, g)


class Conv1dGelu(nn.Module):
    """Whisper-style audio stem conv: Conv1d k3 + GELU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 3, stride, 1)

    def forward(self, x):
        return F.gelu(self.conv(x))


@_fused("conv1d_gelu", "conv_chain", {"n": 1, "cin": 8, "cout": 16, "l": 32},
        {"n": 1, "cin": 80, "cout": 512, "l": 3000})
def _conv1d_gelu(p, g):
    """Conv1d 3 + GELU (Whisper encoder stem)."""
    return Conv1dGelu(p["cin"], p["cout"], 1), (randn(g, p["n"], p["cin"], p["l"]),)


class Conv3dBNRelu(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm3d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@_fused("conv3d_bn_relu", "conv_chain", {"n": 1, "cin": 2, "cout": 4, "dhw": 6},
        {"n": 1, "cin": 32, "cout": 32, "dhw": 16})
def _conv3d_bn_relu(p, g):
    """Conv3d + BatchNorm3d + ReLU (3-D U-Net)."""
    m = Conv3dBNRelu(p["cin"], p["cout"])
    _init_bn(m.bn, g)
    d = p["dhw"]
    return m, (randn(g, p["n"], p["cin"], d, d, d),)


class PatchEmbed(nn.Module):
    """ViT patch embedding: Conv2d with stride = kernel = patch, flatten, + position embedding."""

    def __init__(self, c: int, d: int, patch: int, hw: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(c, d, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, (hw // patch) ** 2, d) * 0.02)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos


@_fused("patch_embedding", "conv_chain", {"n": 1, "cin": 3, "d": 16, "patch": 4, "hw": 16},
        {"n": 1, "cin": 3, "d": 768, "patch": 16, "hw": 224})
def _patch(p, g):
    """ViT patch embedding (strided conv, flatten, transpose, add positions)."""
    return PatchEmbed(p["cin"], p["d"], p["patch"], p["hw"]), _conv_inputs(p, g)


# ============================================================================ norm chains
_SEQ_TINY = {"b": 2, "s": 8, "d": 32}
_SEQ_DEFAULT = {"b": 4, "s": 128, "d": 768}


class LayerNormResidual(nn.Module):
    """Post-norm residual: LayerNorm(x + residual) (BERT)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, res):
        return self.norm(x + res)


@_fused("layernorm_residual", "norm_chain", _SEQ_TINY, _SEQ_DEFAULT)
def _ln_res(p, g):
    """Residual add + LayerNorm."""
    b, s, d = p["b"], p["s"], p["d"]
    return LayerNormResidual(d), (randn(g, b, s, d), randn(g, b, s, d))


class NormAct(nn.Module):
    def __init__(self, norm: nn.Module, act: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.act = act

    def forward(self, x):
        return self.act(self.norm(x))


@_fused("layernorm_gelu", "norm_chain", _SEQ_TINY, _SEQ_DEFAULT)
def _ln_gelu(p, g):
    """LayerNorm + GELU."""
    return NormAct(nn.LayerNorm(p["d"]), nn.GELU()), (randn(g, p["b"], p["s"], p["d"]),)


@_fused("batchnorm_relu", "norm_chain", {"n": 1, "c": 8, "hw": 8}, {"n": 8, "c": 128, "hw": 28})
def _bn_relu(p, g):
    """BatchNorm2d (eval) + ReLU (pre-activation ResNet / DenseNet)."""
    bn = _init_bn(nn.BatchNorm2d(p["c"]), g)
    return NormAct(bn, nn.ReLU()), (randn(g, p["n"], p["c"], p["hw"], p["hw"]),)


@_fused("groupnorm_silu", "norm_chain", {"n": 1, "c": 8, "hw": 8, "groups": 4},
        {"n": 2, "c": 512, "hw": 32, "groups": 32})
def _gn_silu(p, g):
    """GroupNorm + SiLU (diffusion models)."""
    return NormAct(nn.GroupNorm(p["groups"], p["c"]), nn.SiLU()), \
        (randn(g, p["n"], p["c"], p["hw"], p["hw"]),)


class RMSNormLinear(nn.Module):
    """RMSNorm then a projection (Llama pre-norm + q/k/v or MLP input)."""

    def __init__(self, d: int, o: int) -> None:
        super().__init__()
        self.norm = RMSNorm(d)
        self.proj = nn.Linear(d, o, bias=False)

    def forward(self, x):
        return self.proj(self.norm(x))


@_fused("rmsnorm_linear", "norm_chain", {"b": 1, "s": 8, "d": 32, "o": 48},
        {"b": 1, "s": 128, "d": 4096, "o": 4096})
def _rms_linear(p, g):
    """RMSNorm + linear projection."""
    return RMSNormLinear(p["d"], p["o"]), (randn(g, p["b"], p["s"], p["d"]),)


class AddRMSNorm(nn.Module):
    """Residual add then RMSNorm, returning both (Llama decoder layer boundary)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = RMSNorm(d)

    def forward(self, x, res):
        h = x + res
        return self.norm(h), h


@_fused("add_rmsnorm", "norm_chain", _SEQ_TINY, {"b": 1, "s": 128, "d": 4096})
def _add_rms(p, g):
    """Residual add + RMSNorm (two outputs)."""
    b, s, d = p["b"], p["s"], p["d"]
    return AddRMSNorm(d), (randn(g, b, s, d), randn(g, b, s, d))


class EmbeddingLayerNorm(nn.Module):
    """Token + position embeddings, sum, LayerNorm (BERT embeddings)."""

    def __init__(self, vocab: int, s: int, d: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(s, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.tok(ids) + self.pos(pos)[None])


@_fused("embedding_layernorm", "norm_chain", {"b": 2, "s": 8, "d": 32, "vocab": 100},
        {"b": 4, "s": 128, "d": 768, "vocab": 30522})
def _emb_ln(p, g):
    """Embedding gather + position add + LayerNorm."""
    return EmbeddingLayerNorm(p["vocab"], p["s"], p["d"]), \
        (randint(g, p["vocab"], p["b"], p["s"]),)


# ============================================================================ MLP blocks
class MLP(nn.Module):
    def __init__(self, d: int, h: int, act) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)
        self.act = act

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


_MLP_TINY = {"b": 2, "s": 8, "d": 32, "h": 64}
_MLP_DEFAULT = {"b": 1, "s": 128, "d": 768, "h": 3072}


@_fused("mlp_gelu", "mlp", _MLP_TINY, _MLP_DEFAULT)
def _mlp_gelu(p, g):
    """Transformer FFN: linear, GELU, linear (BERT/ViT)."""
    return MLP(p["d"], p["h"], nn.GELU()), (randn(g, p["b"], p["s"], p["d"]),)


@_fused("mlp_relu", "mlp", _MLP_TINY, {"b": 1, "s": 128, "d": 512, "h": 2048})
def _mlp_relu(p, g):
    """Transformer FFN with ReLU (original Transformer / T5)."""
    return MLP(p["d"], p["h"], nn.ReLU()), (randn(g, p["b"], p["s"], p["d"]),)


class SwiGLU(nn.Module):
    """Llama MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, h, bias=False)
        self.up = nn.Linear(d, h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


@_fused("swiglu_mlp", "mlp", _MLP_TINY, {"b": 1, "s": 128, "d": 4096, "h": 11008})
def _swiglu(p, g):
    """SwiGLU MLP (Llama/Mistral/Qwen2)."""
    return SwiGLU(p["d"], p["h"]), (randn(g, p["b"], p["s"], p["d"]),)


class GeGLU(nn.Module):
    """GEGLU: one projection to 2h, split, gelu(a) * b, down projection."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, 2 * h)
        self.down = nn.Linear(h, d)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return self.down(F.gelu(a) * b)


@_fused("geglu_mlp", "mlp", _MLP_TINY, {"b": 2, "s": 256, "d": 320, "h": 1280})
def _geglu(p, g):
    """GEGLU feed-forward (Stable Diffusion transformer blocks)."""
    return GeGLU(p["d"], p["h"]), (randn(g, p["b"], p["s"], p["d"]),)


class MLPClassifier(nn.Module):
    """Three-layer MLP with ReLU (KernelBench level 3 MLP)."""

    def __init__(self, i: int, h: int, o: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                                 nn.Linear(h, o))

    def forward(self, x):
        return self.net(x)


@_fused("mlp_3layer_relu", "mlp", {"b": 4, "i": 32, "h": 64, "o": 10},
        {"b": 64, "i": 1024, "h": 2048, "o": 1000})
def _mlp3(p, g):
    """Three linear layers with ReLU between them."""
    return MLPClassifier(p["i"], p["h"], p["o"]), (randn(g, p["b"], p["i"]),)


class PreNormMLPResidual(nn.Module):
    """x + MLP(LayerNorm(x)) (pre-norm transformer FFN sub-layer)."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = MLP(d, h, nn.GELU(approximate="tanh"))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


@_fused("prenorm_mlp_residual", "mlp", _MLP_TINY, _MLP_DEFAULT)
def _prenorm_mlp(p, g):
    """LayerNorm + MLP + residual (GPT-2 / ViT FFN sub-layer)."""
    return PreNormMLPResidual(p["d"], p["h"]), (randn(g, p["b"], p["s"], p["d"]),)


# ============================================================================ attention blocks
class SelfAttention(nn.Module):
    """Multi-head self-attention with q/k/v/out projections (optionally causal, GQA, RoPE)."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None, causal: bool = False,
                 fused_qkv: bool = False, rope: bool = False, manual: bool = False) -> None:
        super().__init__()
        self.h, self.kv = heads, kv_heads or heads
        self.hd = d // heads
        self.causal, self.fused_qkv, self.rope, self.manual = causal, fused_qkv, rope, manual
        if fused_qkv:
            self.qkv = nn.Linear(d, 3 * d)
        else:
            self.q = nn.Linear(d, heads * self.hd, bias=not rope)
            self.k = nn.Linear(d, self.kv * self.hd, bias=not rope)
            self.v = nn.Linear(d, self.kv * self.hd, bias=not rope)
        self.o = nn.Linear(d, d, bias=not rope)

    def _rope(self, x):
        s, hd = x.shape[2], x.shape[3]
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(s, dtype=torch.float32)[:, None] * inv[None]
        cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
        sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, x):
        b, s, d = x.shape
        if self.fused_qkv:
            q, k, v = self.qkv(x).split(d, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(b, s, self.h, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        if self.rope:
            q, k = self._rope(q), self._rope(k)
        if self.kv != self.h:
            k, v = _repeat_kv(k, self.h // self.kv), _repeat_kv(v, self.h // self.kv)
        if self.manual:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
            if self.causal:
                keep = torch.ones(s, s, dtype=torch.bool).tril()
                scores = scores.masked_fill(~keep, float("-inf"))
            y = torch.matmul(torch.softmax(scores, dim=-1), v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


_ATT_TINY = {"b": 1, "s": 8, "d": 32, "heads": 4}
_ATT_DEFAULT = {"b": 1, "s": 128, "d": 768, "heads": 12}


@_fused("attention_block", "attention_block", _ATT_TINY, _ATT_DEFAULT)
def _attn(p, g):
    """Multi-head self-attention with projections (BERT/ViT), SDPA core."""
    return SelfAttention(p["d"], p["heads"]), (randn(g, p["b"], p["s"], p["d"]),)


@_fused("attention_block_causal_fused_qkv", "attention_block", _ATT_TINY, _ATT_DEFAULT)
def _attn_causal(p, g):
    """Causal self-attention with one fused QKV projection (GPT-2)."""
    return SelfAttention(p["d"], p["heads"], causal=True, fused_qkv=True), \
        (randn(g, p["b"], p["s"], p["d"]),)


@_fused("attention_block_manual", "attention_block", _ATT_TINY, _ATT_DEFAULT)
def _attn_manual(p, g):
    """Self-attention written out: QK^T / sqrt(d), softmax, @V, projections."""
    return SelfAttention(p["d"], p["heads"], manual=True), (randn(g, p["b"], p["s"], p["d"]),)


@_fused("attention_block_causal_manual", "attention_block", _ATT_TINY, _ATT_DEFAULT)
def _attn_causal_manual(p, g):
    """Causal self-attention written out with an additive upper-triangular mask."""
    return SelfAttention(p["d"], p["heads"], causal=True, manual=True), \
        (randn(g, p["b"], p["s"], p["d"]),)


@_fused("attention_block_gqa_rope", "attention_block", {"b": 1, "s": 8, "d": 32, "heads": 4,
                                                        "kv": 2},
        {"b": 1, "s": 128, "d": 4096, "heads": 32, "kv": 8})
def _attn_gqa(p, g):
    """Grouped-query causal attention with rotary embeddings (Llama-3 / Mistral)."""
    return SelfAttention(p["d"], p["heads"], kv_heads=p["kv"], causal=True, rope=True), \
        (randn(g, p["b"], p["s"], p["d"]),)


class RotaryEmbedding(nn.Module):
    """Apply rotary position embedding to q and k (b, h, s, hd)."""

    def forward(self, q, k, cos, sin):
        def rot(x):
            half = x.shape[-1] // 2
            return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return q * cos + rot(q) * sin, k * cos + rot(k) * sin


@_fused("rotary_embedding", "attention_block", {"b": 1, "h": 2, "s": 8, "hd": 8},
        {"b": 1, "h": 32, "s": 512, "hd": 128})
def _rope(p, g):
    """Rotary position embedding applied to q and k (elementwise chain with slices)."""
    b, h, s, hd = p["b"], p["h"], p["s"], p["hd"]
    ang = torch.rand(s, hd // 2, generator=g) * 6.28
    ang = torch.cat([ang, ang], -1)
    return RotaryEmbedding(), (randn(g, b, h, s, hd), randn(g, b, h, s, hd),
                               ang.cos()[None, None], ang.sin()[None, None])


class TransformerEncoderLayer(nn.Module):
    """Post-norm encoder layer: attention + add & norm, FFN + add & norm (BERT layer)."""

    def __init__(self, d: int, heads: int, h: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.n1 = nn.LayerNorm(d)
        self.mlp = MLP(d, h, nn.GELU())
        self.n2 = nn.LayerNorm(d)

    def forward(self, x):
        x = self.n1(x + self.attn(x))
        return self.n2(x + self.mlp(x))


@_fused("transformer_encoder_layer", "transformer_layer", {"b": 1, "s": 8, "d": 32, "heads": 4,
                                                           "h": 64},
        {"b": 1, "s": 128, "d": 768, "heads": 12, "h": 3072})
def _enc_layer(p, g):
    """A whole post-norm transformer encoder layer."""
    return TransformerEncoderLayer(p["d"], p["heads"], p["h"]), \
        (randn(g, p["b"], p["s"], p["d"]),)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm decoder layer: RMSNorm, GQA+RoPE attention, residual, RMSNorm, SwiGLU, residual."""

    def __init__(self, d: int, heads: int, kv: int, h: int) -> None:
        super().__init__()
        self.n1 = RMSNorm(d)
        self.attn = SelfAttention(d, heads, kv_heads=kv, causal=True, rope=True)
        self.n2 = RMSNorm(d)
        self.mlp = SwiGLU(d, h)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


@_fused("llama_decoder_layer", "transformer_layer", {"b": 1, "s": 8, "d": 32, "heads": 4,
                                                     "kv": 2, "h": 64},
        {"b": 1, "s": 128, "d": 2048, "heads": 32, "kv": 8, "h": 8192})
def _llama_layer(p, g):
    """A whole Llama-style decoder layer (written out, not the transformers class)."""
    return LlamaDecoderLayer(p["d"], p["heads"], p["kv"], p["h"]), \
        (randn(g, p["b"], p["s"], p["d"]),)
