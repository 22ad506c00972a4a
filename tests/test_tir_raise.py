"""Raising TIR PrimFuncs to LEIR: real kernels from torch.export + Relax (LegalizeOps, FuseOps,
FuseTIR), the text round trip, numerical equivalence of ``lower(raise(f))`` with ``f``, and
``raise(lower(p)) == p`` for canonical programs."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tvm = pytest.importorskip("tvm")

from steptp.leir import format_program, parse  # noqa: E402
from steptp.tir.raise_ import RaiseError, loop_var_name, raise_primfunc, sanitize_name  # noqa: E402

nn, F = torch.nn, torch.nn.functional

HAVE_LOWER = importlib.util.find_spec("steptp.tir.lower") is not None
HAVE_BUILD = importlib.util.find_spec("steptp.tir.build") is not None
needs_lower = pytest.mark.skipif(not HAVE_LOWER, reason="steptp.tir.lower not available")
needs_build = pytest.mark.skipif(not (HAVE_LOWER and HAVE_BUILD),
                                 reason="steptp.tir.lower/build not available")


# ----------------------------------------------------------------------------- torch modules
class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class _LinearGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x):
        return F.gelu(self.lin(x))


class _ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class _LayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x)


class _GroupNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x):
        return self.norm(x)


class _Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)

    def forward(self, idx):
        return self.emb(idx)


def _rms_norm(x):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)


# name -> (module factory, example-args factory)
CASES = {
    "linear_gelu": (_LinearGelu, lambda: (torch.randn(4, 16),)),
    "conv_bn_relu": (_ConvBnRelu, lambda: (torch.randn(1, 3, 8, 8),)),
    "softmax": (lambda: _Fn(lambda x: torch.softmax(x, -1)), lambda: (torch.randn(4, 16),)),
    "layer_norm": (_LayerNorm, lambda: (torch.randn(4, 16),)),
    "group_norm": (_GroupNorm, lambda: (torch.randn(1, 4, 4, 4),)),
    "mean": (lambda: _Fn(lambda x: x.mean(-1)), lambda: (torch.randn(4, 16),)),
    "max_pool": (lambda: _Fn(lambda x: F.max_pool2d(x, 2)), lambda: (torch.randn(1, 2, 8, 8),)),
    "avg_pool_pad": (lambda: _Fn(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1)),
                     lambda: (torch.randn(1, 2, 8, 8),)),
    "rms_norm": (lambda: _Fn(_rms_norm), lambda: (torch.randn(4, 16),)),
    "embedding": (_Embedding, lambda: (torch.randint(0, 10, (2, 3)),)),
    "elementwise": (lambda: _Fn(lambda x: (-x).abs() ** 1.5 + x.clamp(-0.5, 0.5)
                                + torch.where(x > 0, torch.sigmoid(x), torch.tanh(x))
                                + torch.floor(x) + torch.round(x)),
                    lambda: (torch.randn(4, 8),)),
    "bool_mask": (lambda: _Fn(lambda x: torch.where(((x > 0) & ~(x > 1)) | (x < -1), x, 0.5 * x)),
                  lambda: (torch.randn(4, 8),)),
    "argmax": (lambda: _Fn(lambda x: x.argmax(-1)), lambda: (torch.randn(4, 16),)),
}

# kernels that must not raise, and why (name -> reason code); argmax raises since its
# interdependent tuple reduction is written out as an init guard plus plain stores
EXPECTED_FAILURES: dict[str, str] = {}


@functools.lru_cache(maxsize=None)
def _kernels(case: str):
    from steptp.zoo.relax_import import fused_primfuncs

    torch.manual_seed(0)
    make_module, make_args = CASES[case]
    module = make_module()
    with torch.no_grad():  # give BatchNorm non-trivial running statistics
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return fused_primfuncs(module, make_args())


def _inputs(built, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in built.inputs:
        if p.dtype.startswith("float"):
            out.append(rng.standard_normal(p.shape).astype(p.dtype))
        else:  # indices (embedding rows): small non-negative integers
            out.append(rng.integers(0, 3, p.shape).astype(p.dtype))
    return out


# ----------------------------------------------------------------------------- import helper
def test_fused_primfuncs_returns_named_kernels_and_module():
    from steptp.zoo.relax_import import fused_primfuncs

    kernels, mod = fused_primfuncs(_LinearGelu(), (torch.randn(4, 16),), return_module=True)
    names = [n for n, _ in kernels]
    assert names == sorted(names)
    assert "fused_matmul_add_gelu" in names
    assert all(isinstance(f, tvm.tirx.PrimFunc) for _, f in kernels)
    assert "main" in [gv.name_hint for gv in mod.functions]


# ----------------------------------------------------------------------------- raising real kernels
@pytest.mark.parametrize("case", sorted(CASES))
def test_raise_real_kernels(case):
    kernels = _kernels(case)
    assert kernels
    for name, f in kernels:
        if case in EXPECTED_FAILURES:
            with pytest.raises(RaiseError) as info:
                raise_primfunc(f, name)
            assert info.value.reason == EXPECTED_FAILURES[case]
            continue
        p = raise_primfunc(f, name)
        text = format_program(p)
        assert parse(text) == p, text
        assert format_program(parse(text)) == text
        assert len(p.params) == len(f.params)


@needs_build
@pytest.mark.parametrize("case", sorted(set(CASES) - set(EXPECTED_FAILURES)))
def test_lower_raise_matches_original(case):
    from steptp.tir.build import build, run

    for name, f in _kernels(case):
        p = raise_primfunc(f, name)
        ref = build(f)
        got = build(p)
        assert [x.shape for x in got.inputs] == [x.shape for x in ref.inputs]
        ins = _inputs(ref)
        for want, have in zip(run(ref, ins), run(got, ins)):
            assert want.dtype == have.dtype
            if want.dtype.kind == "f":
                np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{case}/{name}\n{format_program(p)}")
            else:
                np.testing.assert_array_equal(have, want)


def test_raised_structure_matmul_gelu():
    (name, f), = [(n, f) for n, f in _kernels("linear_gelu") if n.startswith("fused_matmul")]
    p = raise_primfunc(f, name)
    assert p.name == "fused_matmul_add_gelu"
    assert [t.name for t in p.inputs] == ["x_", "lv", "p_lin_bias"]   # x -> x_ (a loop-var name)
    assert [t.shape for t in p.inputs] == [(4, 16), (16, 8), (8,)]
    assert len(p.outputs) == 1 and p.outputs[0].shape == (4, 8)
    text = format_program(p)
    assert "\n matmul_intermediate[i,j] += x_[i,k] * lv[k,j]\n" in text  # loops implicit
    assert "erf(" in text


def test_softmax_and_pool_use_max_reductions():
    (name, f), = _kernels("softmax")
    p = raise_primfunc(f, name)
    x = p.inputs[0].name
    text = format_program(p)
    assert f"T_softmax_maxelem[i] max= {x}[i,j]" in text
    assert "T_softmax_expsum[i] += T_softmax_exp[i,j]" in text
    (name, f), = _kernels("max_pool")
    p = raise_primfunc(f, name)
    assert f"max= {p.inputs[0].name}[i,j,k*2+m,l*2+n]" in format_program(p)


def test_independent_tuple_reduction_becomes_two_reductions():
    (name, f), = _kernels("group_norm")
    text = format_program(raise_primfunc(f, name))
    lines = text.splitlines()
    k = next(n for n, line in enumerate(lines) if "x_red_temp_v0[i,j] +=" in line)
    assert "x_red_temp_v1[i,j] +=" in lines[k + 1]
    assert lines[k].startswith("  ") and lines[k + 1].startswith("  ")


def test_padding_becomes_where():
    (name, f), = [(n, f) for n, f in _kernels("conv_bn_relu") if "conv2d" in n]
    text = format_program(raise_primfunc(f, name))
    assert "where(1 <= k and k < 9 and 1 <= l and l < 9, x_[i,j,k-1,l-1], 0.0)" in text
    assert "conv2d_nchw_intermediate[i,j,k,l] += pad_temp[i,m,k+n,l+o] * p_conv_weight[j,m,n,o]" in text


def test_gather_subscript():
    (name, f), = [(n, f) for n, f in _kernels("embedding") if n == "take"]
    assert "p_emb_weight[lv1[i],j]" in format_program(raise_primfunc(f, name))


# ----------------------------------------------------------------------------- hand-written TIR
def _tir(src: str):
    return tvm.script.from_source("# from tvm.script import tirx as T\n" + src)


def test_let_and_predicate():
    f = _tir('''
@T.prim_func(s_tir=True)
def main(A: T.Buffer((T.int64(8),), "float32"), B: T.Buffer((T.int64(6),), "float32")):
    for i in range(T.int64(6)):
        with T.sblock("B"):
            vi = T.axis.spatial(T.int64(6), i)
            T.where(i < T.int64(5))
            t: T.let[T.float32] = A[vi + T.int64(1)] * T.float32(2.0)
            B[vi] = t + t
''')
    p = raise_primfunc(f, "k")
    assert format_program(p) == (
        "kernel f32 k(A[8]) -> B[6]\n"
        " for i in 6:\n"
        "  if i < 5:\n"
        "   B[i] = A[i+1] * 2.0 + A[i+1] * 2.0\n")


def test_dynamic_shape_is_refused():
    f = _tir('''
@T.prim_func(s_tir=True)
def main(var_A: T.handle, B: T.Buffer((T.int64(1),), "float32")):
    n = T.int64()
    A = T.match_buffer(var_A, (n,), "float32")
    for i in range(n):
        with T.sblock("B"):
            vi = T.axis.reduce(n, i)
            with T.init():
                B[0] = T.float32(0)
            B[0] = B[0] + A[vi]
''')
    with pytest.raises(RaiseError) as info:
        raise_primfunc(f)
    assert info.value.reason == "dynamic-shape"


def test_interleaved_params_are_refused():
    f = _tir('''
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"), C: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.sblock("B"):
            vi = T.axis.spatial(4, i)
            B[vi] = A[vi] + C[vi]
''')
    with pytest.raises(RaiseError) as info:
        raise_primfunc(f)
    assert info.value.reason == "interleaved-params"


def test_non_identity_init_is_refused():
    f = _tir('''
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.sblock("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(1.0)
            B[vi] = B[vi] + A[vi, vk]
''')
    with pytest.raises(RaiseError) as info:
        raise_primfunc(f)
    assert info.value.reason == "reduction-init"


def test_integer_max_reduction_and_subtraction_form():
    f = _tir('''
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4, 8), "int32"), B: T.Buffer((4,), "int32"), C: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.sblock("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.min_value("int32")
            B[vi] = T.max(A[vi, vk], B[vi])
    for i, k in T.grid(4, 8):
        with T.sblock("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = T.float32(0)
            C[vi] = C[vi] - T.Cast("float32", A[vi, vk])
''')
    text = format_program(raise_primfunc(f, "k"))
    assert "B[i] max= A[i,j]" in text
    assert "C[i] += -f32(A[i,j])" in text


def test_unsupported_op_and_truncdiv_reasons():
    f = _tir('''
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.sblock("B"):
            vi = T.axis.spatial(4, i)
            B[vi] = T.atan(A[vi])
''')
    with pytest.raises(RaiseError) as info:
        raise_primfunc(f)
    assert info.value.reason == "unsupported-op:atan"
    g = _tir('''
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "int32")):
    for i in range(4):
        with T.sblock("B"):
            vi = T.axis.spatial(4, i)
            B[vi] = T.truncdiv(A[vi], 2)
''')
    with pytest.raises(RaiseError) as info:
        raise_primfunc(g)
    assert info.value.reason == "truncdiv"


def test_names():
    assert [loop_var_name(d) for d in (0, 1, 2, 17, 18, 19)] == ["i", "j", "k", "z", "i1", "j1"]
    assert sanitize_name("x") == "x_"
    assert sanitize_name("k2") == "k2_"
    assert sanitize_name("for") == "for_"
    assert sanitize_name("f32") == "f32_"
    assert sanitize_name("exp") == "exp_"
    assert sanitize_name("a.b-c") == "a_b_c"
    assert sanitize_name("1x") == "_1x"
    assert sanitize_name("T_add") == "T_add"
    assert sanitize_name("k", kernel=True) == "k"
    assert sanitize_name("for", kernel=True) == "for_"


# ----------------------------------------------------------------------------- raise(lower(p)) == p
CANONICAL = [
    """kernel f32 fused_matmul_add_gelu(A[8,64], B[64,32], C[32]) -> D[8,32]
 T0[8,32]
 for i in 8 parallel, j in 32:
  T0[i,j] += A[i,k] * B[k,j]
  D[i,j] = (T0[i,j] + C[j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
""",
    """kernel f32 softmax(A[4,16]) -> B[4,16]
 T0[4]
 T1[4]
 for i in 4:
  T0[i] max= A[i,j]
  T1[i] += exp(A[i,j] - T0[i])
  for j in 16 vectorized:
   B[i,j] = exp(A[i,j] - T0[i]) / T1[i]
""",
    """kernel f32 misc(A[10], B[6] i64, C) -> D[12], E
 T0[12] local
 for i in 3, j in 4 unrolled:
  if i * 4 + j < 10:
   T0[i*4+j] = A[i*4+j] * C
  if i * 4 + j >= 10:
   T0[i*4+j] = f32(i) * 0.5
 D[i] = where(T0[i] > 0.0 and not isnan(T0[i]), -T0[i], A[B[i%6]] + f32(i // 3))
 E min= D[i]
""",
    """kernel i32 int_reduce(A[4,8]) -> B[4], C[4] f64
 B[i] max= A[i,j] * 2 - j
 C[i] *= f64(A[i,j]) + 0.25
""",
]


@needs_lower
@pytest.mark.parametrize("text", CANONICAL, ids=lambda t: t.split("(")[0][7:])
def test_raise_lower_roundtrip(text):
    from steptp.tir.lower import lower

    p = parse(text)
    assert format_program(p) == text  # the fixtures are canonical
    q = raise_primfunc(lower(p), name=p.name)
    assert format_program(q) == text
    assert q == p


def test_raised_structure_argmax():
    """A tuple reduction whose accumulators read each other (argmax) is written out: the init
    under "every reduction axis at its first iteration", then the updates as plain stores."""
    ((name, f),) = _kernels("argmax")
    text = format_program(raise_primfunc(f, name))
    assert "  if j == 0:\n" in text, text
    assert "max=" not in text and "where(" in text
