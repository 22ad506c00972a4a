"""User workloads: pkg.module:factory with an input spec, and KernelBench-style problem folders."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")

from steptp.zoo import user, workloads  # noqa: E402
from steptp.zoo.model_check import import_check, whole_model_check  # noqa: E402


# ----------------------------------------------------------------------------- input specs
def test_parse_input_spec():
    spec = user.parse_input_spec("f32[1,3,32,32]; i64[1,16]@0:1000;bf16[];bool[2]")
    assert spec[0] == (torch.float32, (1, 3, 32, 32), None)
    assert spec[1] == (torch.int64, (1, 16), (0.0, 1000.0))
    assert spec[2] == (torch.bfloat16, (), None)
    assert spec[3][0] == torch.bool
    g = torch.Generator().manual_seed(1)
    a, ids, s, b = user.parse_inputs("f32[1,3,32,32];i64[1,16]@5:9;bf16[];bool[2]", g)
    assert a.shape == (1, 3, 32, 32) and a.dtype == torch.float32
    assert ids.dtype == torch.int64 and int(ids.min()) >= 5 and int(ids.max()) < 9
    assert s.shape == () and s.dtype == torch.bfloat16 and b.dtype == torch.bool
    (u,) = user.parse_inputs("f16[64]@-1:1")
    assert u.dtype == torch.float16 and float(u.abs().max()) <= 1


@pytest.mark.parametrize("bad", ["", "f32", "f32[1,x]", "q8[2]", "f32[2]@3:1", "f32[1,,2]",
                                 "__import__('os')[1]"])
def test_parse_input_spec_rejects(bad):
    with pytest.raises(ValueError):
        user.parse_input_spec(bad)


# ----------------------------------------------------------------------------- factories
@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    pkg = tmp_path / "mymodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, padding=1)
                self.emb = nn.Embedding(100, 8)

            def forward(self, x, ids):
                return self.conv(x).mean(dim=(2, 3)) + self.emb(ids).mean(dim=1)

        def make_net():
            return Net()

        def make_with_inputs():
            return nn.Linear(16, 4), (torch.randn(2, 16),)

        NOT_CALLABLE = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mymodels.nets"
    for mod in ("mymodels.nets", "mymodels"):
        sys.modules.pop(mod, None)


def test_user_factory_with_input_spec(factory_module):
    w = user.from_factory(f"{factory_module}:make_net", "f32[2,3,16,16];i64[2,5]@0:100")
    assert w.suite == "user" and w.name == "user.mymodels.nets.make_net"
    m, (x, ids) = w.build("tiny")
    assert x.shape == (2, 3, 16, 16) and ids.dtype == torch.int64 and not m.training
    m2, (x2, _) = w.build("tiny")
    assert torch.equal(x, x2)
    r = import_check(w, "tiny")
    assert r.n_primfuncs >= 3
    res = whole_model_check(w, "tiny")
    assert res.passed, res


def test_user_factory_returning_inputs(factory_module):
    w = user.from_factory(f"{factory_module}:make_with_inputs")
    m, (x,) = w.build("default")
    assert x.shape == (2, 16)
    import_check(w)


def test_user_factory_errors(factory_module):
    with pytest.raises(ValueError):
        user.from_factory("no colon here")
    with pytest.raises(ValueError):
        user.from_factory("os;rm:x")
    with pytest.raises(AttributeError):
        user.from_factory(f"{factory_module}:missing")
    with pytest.raises(TypeError):
        user.from_factory(f"{factory_module}:NOT_CALLABLE")
    with pytest.raises(ModuleNotFoundError):
        user.from_factory("no_such_pkg_xyz.mod:f")
    with pytest.raises(ValueError):
        user.from_factory(f"{factory_module}:make_net", "f32[2,3")
    w = user.from_factory(f"{factory_module}:make_net")  # no inputs anywhere
    with pytest.raises(ValueError, match="--inputs"):
        w.build()


def test_user_register(factory_module):
    w = user.from_factory(f"{factory_module}:make_with_inputs", name="user.test_register",
                          register=True)
    try:
        assert workloads.get("user.test_register") is w
        assert w in workloads.suite("user") and w not in workloads.suite("default")
        with pytest.raises(ValueError, match="already registered"):
            workloads.register(w)
    finally:
        workloads.WORKLOADS.pop("user.test_register", None)


# ----------------------------------------------------------------------------- problem folders
MATMUL_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """C = relu(A @ B)"""
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.relu(torch.matmul(A, B))

M = 256
K = 128
N = 64

def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]

def get_init_inputs():
    return []
'''

CONV_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1, groups=groups)

    def forward(self, x):
        return torch.softmax(self.conv(x), dim=1)

batch_size = 2
in_channels = 32
out_channels = 64
kernel_size = 3
groups = 4
height, width = 64, 64
image_shape = (height, width)

def get_inputs():
    return [torch.randn(batch_size, in_channels, *image_shape)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
'''

BROKEN_BY_SCALING = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]

dim = 20     # 20 * 0.25 = 5, not divisible by heads = 2 (unscaled: below min_dim)
heads = 2

def get_inputs():
    return [torch.randn(1, 4, dim)]

def get_init_inputs():
    return [dim, heads]
'''


@pytest.fixture
def problems_dir(tmp_path):
    d = tmp_path / "problems"
    d.mkdir()
    (d / "1_matmul_relu.py").write_text(MATMUL_PROBLEM)
    (d / "2_conv_softmax.py").write_text(CONV_PROBLEM)
    (d / "helpers.py").write_text("X = 1\n")  # not a problem file: skipped
    return d


def test_load_problems(problems_dir):
    ws = user.load_problems(problems_dir)
    assert [w.name for w in ws] == ["1_matmul_relu", "2_conv_softmax"]
    m, (a, b) = ws[0].build("default")
    assert a.shape == (256, 128) and b.shape == (128, 64)
    m, (x,) = ws[1].build("default")
    assert x.shape == (2, 32, 64, 64) and m.conv.groups == 4
    a1 = ws[0].build("default")[1][0]
    assert torch.equal(a, a) and torch.equal(a1, ws[0].build("default")[1][0])  # seeded
    for w in ws:
        import_check(w, "tiny")
        assert whole_model_check(w, "tiny").passed


def test_problem_scale(problems_dir):
    ws = user.load_problems(problems_dir, scale=0.5, tiny_scale=0.25)
    m, (a, b) = ws[0].build("default")
    assert a.shape == (128, 64) and b.shape == (64, 32)
    m, (a, b) = ws[0].build("tiny")
    assert a.shape == (64, 32) and b.shape == (32, 16)
    assert ws[0].meta["applied_scale"] == {"default": 0.5, "tiny": 0.25}
    m, (x,) = ws[1].build("tiny")
    # batch 2, kernel 3, groups 4 are below min_dim and stay; channels and image shrink
    assert x.shape == (2, 8, 16, 16)
    assert m.conv.out_channels == 16 and m.conv.kernel_size == (3, 3) and m.conv.groups == 4
    assert ws[1].meta["scaled_globals"]["tiny"]["image_shape"] == (16, 16)
    import_check(ws[1], "tiny")


def test_problem_scale_falls_back(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "mha.py").write_text(BROKEN_BY_SCALING)
    (w,) = user.load_problems(d, scale=0.25, tiny_scale=None, min_dim=16)
    m, (x,) = w.build("default")
    # 0.25 -> dim 5 fails (5 % 2 != 0); sqrt(0.25) = 0.5 -> dim 10 works
    assert w.meta["applied_scale"]["default"] == 0.5
    assert x.shape == (1, 4, 10)
    assert w.meta["scale_fallbacks"]


def test_load_problems_errors(tmp_path):
    with pytest.raises(NotADirectoryError):
        user.load_problems(tmp_path / "missing")
    (tmp_path / "x.py").write_text("print('hi')\n")
    with pytest.raises(FileNotFoundError):
        user.load_problems(tmp_path)
    with pytest.raises(ValueError):
        user.problem_workload(tmp_path / "x.py", scale=2.0)


# ----------------------------------------------------------------------------- scale forms
def test_parse_scale_forms_and_errors():
    assert user.parse_scale(0.25) == user.Scale("factor", 0.25)
    assert user.parse_scale("0.5") == user.Scale("factor", 0.5)
    assert user.parse_scale("elements=1M") == user.Scale("elements", float(1 << 20))
    assert user.parse_scale("elements=64k").value == 64000
    assert user.parse_scale("ms=50") == user.Scale("seconds", 0.05)
    assert str(user.parse_scale("elements=4096")) == "elements=4096"
    for bad in ("2", "0", "elements=", "elements=-3", "size=4", "fast"):
        with pytest.raises(user.ScaleError, match="scale"):
            user.parse_scale(bad)


LITERAL_CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))

def get_inputs():
    return [torch.randn(10, 3, 224, 224)]

def get_init_inputs():
    return []
'''


def test_elements_target_shrinks_literal_input_sizes(tmp_path):
    (tmp_path / "conv.py").write_text(LITERAL_CONV)
    w = user.problem_workload(tmp_path / "conv.py", scale="elements=65536")
    m, (x,) = w.build("default")
    used = w.meta["scale_used"]["default"]
    # no size global to scale: the batch and spatial input dims shrink (channels stay 3)
    assert x.shape[1] == 3 and x.shape[2] == x.shape[3] and x.numel() * 8 // 3 <= 65536
    assert used["largest_elements"] <= 65536 and used["shrunk_inputs"][0][0] == [10, 3, 224, 224]
    assert used["input_shapes"] == [list(x.shape)]
    assert m(x).shape == (x.shape[0], 8, x.shape[2], x.shape[3])


def test_elements_target_scales_globals(problems_dir):
    (w, _conv) = user.load_problems(problems_dir, scale="elements=4096", tiny_scale=None)
    m, (a, b) = w.build("default")
    # 256x128 -> the largest factor on the ladder whose biggest tensor fits 4096 elements
    assert a.numel() <= 4096 and b.numel() <= 4096 and a.shape[1] == b.shape[0]
    assert 0 < w.meta["applied_scale"]["default"] < 1


def test_target_that_cannot_be_met_builds_the_smallest_within_the_cap(tmp_path):
    (tmp_path / "conv.py").write_text(LITERAL_CONV)
    # the weight has 216 elements: no shape gets under 100; inputs shrink until the weight is
    # the largest tensor, that size is extracted and the miss is recorded
    w = user.problem_workload(tmp_path / "conv.py", scale="elements=100")
    m, (x,) = w.build("default")
    used = w.meta["scale_used"]["default"]
    assert used["largest_elements"] == 216 and x.numel() * 8 // 3 <= 216 and x.shape[1] == 3
    assert "over the target 100" in used["target_missed"]
    # past the hard cap it is an error, never a build
    w = user.problem_workload(tmp_path / "conv.py", scale="elements=100", max_elements=200)
    with pytest.raises(RuntimeError, match="cannot fit the largest tensor into 100 elements"):
        w.build("default")


HUGE_ONLY_UNSCALED = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        assert dim % heads == 0, "dim must be a multiple of heads"
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return self.lin(x)

dim = 8190        # x 0.5 = 4095, x 0.25 = 2048, x 0.125 = 1024, x 0.0625 = 512: no multiple of 10
heads = 10

def get_inputs():
    return [torch.randn(2, dim)]

def get_init_inputs():
    return [dim, heads]
'''


def test_factor_never_falls_back_past_the_size_cap(tmp_path):
    (tmp_path / "p.py").write_text(HUGE_ONLY_UNSCALED)
    w = user.problem_workload(tmp_path / "p.py", scale=0.25, tiny_scale=None,
                              max_elements=1 << 20)
    with pytest.raises(RuntimeError, match="over the cap") as e:
        w.build("default")
    assert "scale 1:" in str(e.value)  # named as not tried, never built: 8190^2 > 2^20


def test_seconds_target_times_the_forward_pass(problems_dir):
    (w, _conv) = user.load_problems(problems_dir, scale="seconds=30", tiny_scale=None)
    m, (a, b) = w.build("default")
    used = w.meta["scale_used"]["default"]
    # a 256x128x64 matmul is far under 30 s: the size stays, the measured time is recorded
    assert a.shape == (256, 128) and used["form"] == "seconds=30"
    assert 0 < used["forward_seconds"] < 30


DATA_IN_INIT = '''
import torch
import torch.nn as nn

N = 256

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = float(torch.ones(1).sum()) * 0.5   # reads data: no meta-device build

    def forward(self, x):
        return self.lin(x) * self.scale

def get_inputs():
    return [torch.randn(N, N)]

def get_init_inputs():
    return [N]
'''


def test_elements_target_without_a_meta_build_probes_small_sizes_for_real(tmp_path):
    (tmp_path / "p.py").write_text(DATA_IN_INIT)
    w = user.problem_workload(tmp_path / "p.py", scale="elements=5000")
    m, (x,) = w.build("default")
    used = w.meta["scale_used"]["default"]
    assert used["probed_on"] == "cpu" and x.shape == (64, 64) and used["largest_elements"] <= 5000


# ----------------------------------------------------------------------------- partial scaling
ARCH = Path(__file__).parent / "fixtures" / "problems_arch"


def test_a_model_built_for_one_image_size_scales_everything_else():
    """Swin's pattern: the model asserts its input's size; at 0.25 (and every uniform fallback)
    the scaled image is rejected, so ``image_size`` alone stays and the rest is scaled."""
    w = user.problem_workload(ARCH / "swin_fixed_size.py", scale=0.25, tiny_scale=None)
    m, (x,) = w.build("default")
    used = w.meta["scale_used"]["default"]
    assert x.shape == (8, 3, 32, 32)                  # batch 16 -> 8 (a multiple of 8), image kept
    assert used["kept_globals"] == ["image_size"] and used["factor"] == 0.25
    assert "Input image size (8*8) doesn't match model (32*32)" in used["partial_scaling"]
    assert w.meta["scaled_globals"]["default"]["embed_dim"] == 8
    assert m.embed.out_channels == 8
    # the element target gets there too: image kept, batch shrunk
    w = user.problem_workload(ARCH / "swin_fixed_size.py", scale="elements=4096", tiny_scale=None)
    m, (x,) = w.build("default")
    used = w.meta["scale_used"]["default"]
    assert x.shape[2:] == (32, 32) and used["largest_elements"] <= 4096
    assert used["kept_globals"] == ["image_size"]


def test_channels_that_must_divide_the_groups_stay_where_no_factor_keeps_them_divisible():
    """ShuffleNet's pattern: 48 channels with groups 3. At 0.25 they round to 16 (no unit);
    the uniform fallback 0.5 (24 channels) is preferred; under an element target that needs
    smaller sizes, the channels stay and the batch and image shrink."""
    w = user.problem_workload(ARCH / "shufflenet_groups.py", scale=0.25, tiny_scale=None)
    m, (x,) = w.build("default")
    assert x.shape == (8, 24, 16, 16) and w.meta["applied_scale"]["default"] == 0.5
    assert "divisible by groups" in w.meta["scale_fallbacks"][0]
    w = user.problem_workload(ARCH / "shufflenet_groups.py", scale="elements=4096",
                              tiny_scale=None)
    m, (x,) = w.build("default")
    used = w.meta["scale_used"]["default"]
    assert x.shape[1] == 48 and used["kept_globals"] == ["channels"]
    assert used["largest_elements"] <= 4096 and x.numel() <= 4096
    assert m(x).shape == x.shape
