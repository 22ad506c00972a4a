"""Writes a folder of small architecture problems in the KernelBench style (``class Model``,
``get_inputs()``, ``get_init_inputs()``, size globals at module level), written here for the
extraction benchmark of architecture folders (``python benchmarks/extraction.py --archs``).

Eighteen families, three variants each but the last two (one each): 50 files: MLPs, VGG-style and
ResNet-style CNNs, inverted residuals, a ShuffleNet unit (grouped convolutions whose channels
must divide the groups), a Swin-style stage that asserts its input image size, a ViT block
(the image must divide into patches), text transformers, a causal GPT block, SqueezeNet fire
modules, DenseNet blocks, a small U-Net, ConvNeXt blocks, squeeze-excite, MLP-Mixer, an
unrolled GRU, 1-D audio convolutions. The variants change sizes, depth and activations. The
two patterns issue 35 found in real architecture folders are here on purpose: models that
reject a scaled input size and channel counts that stop dividing their groups.

    python benchmarks/problems/make_arch_problems.py OUT_DIR     # writes OUT_DIR/*.py (50)
"""

from __future__ import annotations

import sys
from pathlib import Path
from string import Template

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"

FAMILIES: dict[str, tuple[str, list[dict]]] = {}

FAMILIES["mlp"] = ('''
batch_size = $batch
in_features = $inp
hidden = $hidden
out_features = $out
depth = $depth


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features, depth):
        super().__init__()
        dims = [in_features] + [hidden] * depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(hidden, out_features)

    def forward(self, x):
        for layer in self.layers:
            x = F.$act(layer(x))
        return self.head(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features, depth]
''', [dict(batch=64, inp=512, hidden=1024, out=128, depth=3, act="relu"),
      dict(batch=32, inp=256, hidden=512, out=64, depth=2, act="gelu"),
      dict(batch=128, inp=384, hidden=768, out=10, depth=4, act="silu")])

FAMILIES["vgg"] = ('''
batch_size = $batch
image_size = $image
width = $width
num_classes = $classes


class Model(nn.Module):
    def __init__(self, width, num_classes):
        super().__init__()
        chans = [3, width, 2 * width, 4 * width]
        layers = []
        for a, b in zip(chans[:-1], chans[1:]):
            layers += [nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), nn.Conv2d(b, b, 3, padding=1),
                       nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [width, num_classes]
''', [dict(batch=8, image=64, width=32, classes=100),
      dict(batch=4, image=96, width=16, classes=10),
      dict(batch=16, image=32, width=64, classes=1000)])

FAMILIES["resnet_basic"] = ('''
batch_size = $batch
channels = $channels
image_size = $image
blocks = $blocks


class Block(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                      nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class Model(nn.Module):
    def __init__(self, channels, blocks):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.Sequential(*[Block(channels if i == 0 else 2 * channels, 2 * channels,
                                            2 if i == 0 else 1) for i in range(blocks)])

    def forward(self, x):
        return self.blocks(F.relu(self.stem(x))).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [channels, blocks]
''', [dict(batch=8, channels=32, image=64, blocks=2),
      dict(batch=16, channels=16, image=32, blocks=3),
      dict(batch=4, channels=64, image=56, blocks=1)])

FAMILIES["bottleneck"] = ('''
batch_size = $batch
in_channels = $cin
mid_channels = $mid
image_size = $image
expansion = 4


class Model(nn.Module):
    def __init__(self, in_channels, mid_channels):
        super().__init__()
        out = mid_channels * expansion
        self.c1 = nn.Conv2d(in_channels, mid_channels, 1, bias=False)
        self.b1 = nn.BatchNorm2d(mid_channels)
        self.c2 = nn.Conv2d(mid_channels, mid_channels, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(mid_channels)
        self.c3 = nn.Conv2d(mid_channels, out, 1, bias=False)
        self.b3 = nn.BatchNorm2d(out)
        self.proj = nn.Conv2d(in_channels, out, 1, bias=False)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        return F.relu(self.b3(self.c3(y)) + self.proj(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, mid_channels]
''', [dict(batch=8, cin=64, mid=32, image=56),
      dict(batch=16, cin=128, mid=64, image=28),
      dict(batch=4, cin=256, mid=64, image=32)])

FAMILIES["inverted_residual"] = ('''
batch_size = $batch
channels = $channels
expand = $expand
image_size = $image


class Model(nn.Module):
    """MobileNetV2's inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project, ReLU6."""

    def __init__(self, channels, expand):
        super().__init__()
        hid = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, hid, 1, bias=False), nn.BatchNorm2d(hid),
                                    nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(hid, hid, 3, padding=1, groups=hid, bias=False),
                                nn.BatchNorm2d(hid), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(hid, channels, 1, bias=False),
                                     nn.BatchNorm2d(channels))

    def forward(self, x):
        return x + self.project(self.dw(self.expand(x)))


def get_inputs():
    return [torch.randn(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, expand]
''', [dict(batch=16, channels=32, expand=6, image=56),
      dict(batch=8, channels=64, expand=4, image=28),
      dict(batch=32, channels=24, expand=6, image=32)])

FAMILIES["shufflenet"] = ('''
batch_size = $batch
channels = $channels
groups = $groups
image_size = $image


class Model(nn.Module):
    """A ShuffleNet unit: grouped 1x1 convolutions (the channels must divide the groups), a
    channel shuffle, a depthwise 3x3."""

    def __init__(self, channels, groups):
        super().__init__()
        mid = channels // 4
        self.groups = groups
        self.g1 = nn.Conv2d(channels, mid, 1, groups=groups, bias=False)
        self.b1 = nn.BatchNorm2d(mid)
        self.dw = nn.Conv2d(mid, mid, 3, padding=1, groups=mid, bias=False)
        self.b2 = nn.BatchNorm2d(mid)
        self.g2 = nn.Conv2d(mid, channels, 1, groups=groups, bias=False)
        self.b3 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.b1(self.g1(x)))
        b, c, h, w = y.shape
        y = y.view(b, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(b, c, h, w)
        y = self.b3(self.g2(self.b2(self.dw(y))))
        return F.relu(x + y)


def get_inputs():
    return [torch.randn(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, groups]
''', [dict(batch=16, channels=240, groups=3, image=28),
      dict(batch=8, channels=48, groups=3, image=56),
      dict(batch=16, channels=120, groups=5, image=32)])

FAMILIES["swin"] = ('''
batch_size = $batch
image_size = $image
embed_dim = $dim
num_heads = $heads
window = 4
patch = 4


class Model(nn.Module):
    """A Swin-style stage built for one image size: it asserts its input has it."""

    def __init__(self, embed_dim, num_heads, img_size=$image):
        super().__init__()
        self.img_size, self.heads = img_size, num_heads
        self.embed = nn.Conv2d(3, embed_dim, patch, stride=patch)
        self.n1 = nn.LayerNorm(embed_dim)
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.n2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, 4 * embed_dim), nn.GELU(),
                                 nn.Linear(4 * embed_dim, embed_dim))

    def forward(self, x):
        _, _, h, w = x.shape
        assert h == self.img_size and w == self.img_size, \\
            f"Input image size ({h}*{w}) doesn't match model ({self.img_size}*{self.img_size})."
        x = self.embed(x).permute(0, 2, 3, 1)
        b, hh, ww, c = x.shape
        t = x.reshape(b, hh // window, window, ww // window, window, c)
        t = t.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)
        n = t.shape[1]
        qkv = self.qkv(self.n1(t)).reshape(-1, n, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5, dim=-1)
        t = t + self.proj((a @ v).transpose(1, 2).reshape(-1, n, c))
        t = t + self.mlp(self.n2(t))
        return t.reshape(b, -1, c).mean(dim=1)


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [embed_dim, num_heads]
''', [dict(batch=8, image=64, dim=96, heads=3),
      dict(batch=16, image=32, dim=48, heads=2),
      dict(batch=4, image=96, dim=64, heads=4)])

FAMILIES["vit"] = ('''
batch_size = $batch
image_size = $image
patch_size = $patch
dim = $dim
heads = $heads


class Model(nn.Module):
    """A ViT block: patch embedding (the image must divide into patches), a learned position
    embedding of the configured patch count, pre-norm attention and MLP."""

    def __init__(self, image_size, patch_size, dim, heads):
        super().__init__()
        assert image_size % patch_size == 0, "image size must be a multiple of the patch size"
        self.heads = heads
        self.embed = nn.Conv2d(3, dim, patch_size, stride=patch_size)
        self.pos = nn.Parameter(torch.randn(1, (image_size // patch_size) ** 2, dim) * 0.02)
        self.n1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.n2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        b, n, c = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch_size, dim, heads]
''', [dict(batch=8, image=64, patch=16, dim=128, heads=4),
      dict(batch=4, image=96, patch=8, dim=96, heads=3),
      dict(batch=16, image=32, patch=4, dim=64, heads=2)])

FAMILIES["text_encoder"] = ('''
batch_size = $batch
seq_len = $seq
d_model = $dim
n_heads = $heads
vocab = $vocab


class Model(nn.Module):
    def __init__(self, vocab, d_model, n_heads):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.n1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.$act(),
                                nn.Linear(4 * d_model, d_model))
        self.n2 = nn.LayerNorm(d_model)

    def forward(self, ids):
        x = self.emb(ids)
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (c // self.h) ** -0.5, dim=-1)
        x = self.n1(x + self.o((att @ v).transpose(1, 2).reshape(b, t, c)))
        return self.n2(x + self.ff(x))


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab, d_model, n_heads]
''', [dict(batch=8, seq=128, dim=256, heads=4, vocab=1000, act="GELU"),
      dict(batch=16, seq=64, dim=128, heads=2, vocab=500, act="ReLU"),
      dict(batch=4, seq=256, dim=192, heads=3, vocab=2000, act="GELU")])

FAMILIES["gpt_block"] = ('''
batch_size = $batch
seq_len = $seq
block_size = $block
n_embd = $dim
n_head = $heads


class Model(nn.Module):
    """A causal GPT block with a fixed-size causal mask buffer (the sequence must fit it)."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.h = n_head
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.out = nn.Linear(4 * n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)).view(
            1, 1, block_size, block_size))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.h, c // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, c // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, c // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.h) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, block_size]
''', [dict(batch=8, seq=128, block=256, dim=192, heads=3),
      dict(batch=4, seq=256, block=256, dim=128, heads=4),
      dict(batch=16, seq=64, block=128, dim=256, heads=8)])

FAMILIES["squeezenet_fire"] = ('''
batch_size = $batch
in_channels = $cin
squeeze = $sq
expand = $ex
image_size = $image


class Model(nn.Module):
    def __init__(self, in_channels, squeeze, expand):
        super().__init__()
        self.sq = nn.Conv2d(in_channels, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x):
        s = F.relu(self.sq(x))
        y = torch.cat([F.relu(self.e1(s)), F.relu(self.e3(s))], dim=1)
        return self.pool(y)


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, squeeze, expand]
''', [dict(batch=16, cin=96, sq=16, ex=64, image=56),
      dict(batch=8, cin=128, sq=32, ex=128, image=28),
      dict(batch=32, cin=64, sq=16, ex=32, image=32)])

FAMILIES["densenet_block"] = ('''
batch_size = $batch
in_channels = $cin
growth = $growth
layers = $layers
image_size = $image


class Model(nn.Module):
    def __init__(self, in_channels, growth, layers):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(in_channels + i * growth), nn.ReLU(),
                          nn.Conv2d(in_channels + i * growth, growth, 3, padding=1, bias=False))
            for i in range(layers))

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(torch.cat(feats, dim=1)))
        return torch.cat(feats, dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, growth, layers]
''', [dict(batch=8, cin=32, growth=16, layers=3, image=32),
      dict(batch=4, cin=64, growth=32, layers=2, image=28),
      dict(batch=16, cin=24, growth=12, layers=4, image=24)])

FAMILIES["unet"] = ('''
batch_size = $batch
channels = $channels
image_size = $image


class Model(nn.Module):
    """A two-level U-Net: down convolutions, a transposed-convolution upsampling, a skip
    concatenation."""

    def __init__(self, channels):
        super().__init__()
        c = channels
        self.d1 = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
        self.d2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.u1 = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        return self.out(self.u1(torch.cat([a, self.up(b)], dim=1)))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [channels]
''', [dict(batch=4, channels=32, image=64),
      dict(batch=8, channels=16, image=96),
      dict(batch=2, channels=64, image=32)])

FAMILIES["convnext"] = ('''
batch_size = $batch
dim = $dim
image_size = $image


class Model(nn.Module):
    """A ConvNeXt block: 7x7 depthwise, channels-last LayerNorm, pointwise MLP, layer scale."""

    def __init__(self, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(batch_size, dim, image_size, image_size)]


def get_init_inputs():
    return [dim]
''', [dict(batch=8, dim=96, image=56),
      dict(batch=4, dim=192, image=28),
      dict(batch=16, dim=64, image=32)])

FAMILIES["squeeze_excite"] = ('''
batch_size = $batch
channels = $channels
reduction = $red
image_size = $image


class Model(nn.Module):
    """A conv layer followed by squeeze-and-excitation and a SiLU (EfficientNet's MBConv
    tail)."""

    def __init__(self, channels, reduction):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x):
        y = F.silu(self.bn(self.conv(x)))
        s = torch.sigmoid(self.fc2(F.silu(self.fc1(y.mean(dim=(2, 3), keepdim=True)))))
        return y * s


def get_inputs():
    return [torch.randn(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, reduction]
''', [dict(batch=16, channels=64, red=4, image=32),
      dict(batch=8, channels=128, red=8, image=28),
      dict(batch=4, channels=256, red=16, image=16)])

FAMILIES["mlp_mixer"] = ('''
batch_size = $batch
num_patches = $patches
dim = $dim
token_hidden = $th
channel_hidden = $ch


class Model(nn.Module):
    def __init__(self, num_patches, dim, token_hidden, channel_hidden):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(num_patches, token_hidden), nn.GELU(),
                                 nn.Linear(token_hidden, num_patches))
        self.n2 = nn.LayerNorm(dim)
        self.chan = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(),
                                  nn.Linear(channel_hidden, dim))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.chan(self.n2(x))


def get_inputs():
    return [torch.randn(batch_size, num_patches, dim)]


def get_init_inputs():
    return [num_patches, dim, token_hidden, channel_hidden]
''', [dict(batch=16, patches=64, dim=128, th=64, ch=512),
      dict(batch=8, patches=196, dim=96, th=128, ch=384),
      dict(batch=32, patches=49, dim=64, th=32, ch=256)])

FAMILIES["gru_unrolled"] = ('''
batch_size = $batch
input_size = $inp
hidden_size = $hidden
steps = $steps


class Model(nn.Module):
    """A GRU cell unrolled over a few steps (each step: two matmuls, sigmoid and tanh gates)."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.x2h = nn.Linear(input_size, 3 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x, h):
        for t in range(x.shape[1]):
            gx = self.x2h(x[:, t]).chunk(3, dim=1)
            gh = self.h2h(h).chunk(3, dim=1)
            r = torch.sigmoid(gx[0] + gh[0])
            z = torch.sigmoid(gx[1] + gh[1])
            n = torch.tanh(gx[2] + r * gh[2])
            h = (1 - z) * n + z * h
        return h


def get_inputs():
    return [torch.randn(batch_size, steps, input_size), torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size]
''', [dict(batch=32, inp=128, hidden=256, steps=4)])

FAMILIES["audio_conv1d"] = ('''
batch_size = $batch
channels = $channels
length = $length


class Model(nn.Module):
    """1-D convolutions over a waveform: strided conv, BatchNorm, ReLU, max pool, dilated conv."""

    def __init__(self, channels):
        super().__init__()
        self.c1 = nn.Conv1d(1, channels, 9, stride=4, padding=4)
        self.bn = nn.BatchNorm1d(channels)
        self.c2 = nn.Conv1d(channels, channels, 3, padding=2, dilation=2)

    def forward(self, x):
        y = F.max_pool1d(F.relu(self.bn(self.c1(x))), 2)
        return F.relu(self.c2(y)).mean(dim=-1)


def get_inputs():
    return [torch.randn(batch_size, 1, length)]


def get_init_inputs():
    return [channels]
''', [dict(batch=16, channels=64, length=16000)])


def problems() -> dict[str, str]:
    """File name -> source, 50 files."""
    out: dict[str, str] = {}
    n = 0
    for fam, (tmpl, variants) in FAMILIES.items():
        for i, v in enumerate(variants):
            n += 1
            doc = f'"""Architecture problem {n}: {fam.replace("_", " ")}, variant {i + 1}."""\n\n'
            out[f"{n:02d}_{fam}_{i + 1}.py"] = doc + HEAD + Template(tmpl).substitute(v).lstrip("\n")
    return out


def write(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in problems().items():
        (folder / name).write_text(text)
        paths.append(folder / name)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ps = write(sys.argv[1])
    print(f"wrote {len(ps)} problems to {sys.argv[1]}")
