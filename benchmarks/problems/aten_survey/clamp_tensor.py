import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """clamp with tensor bounds"""

    def forward(self, x, lo, hi):
        return torch.clamp(x, lo, hi)


def get_inputs():
    return [torch.randn(4, 8), -torch.rand(4, 8), torch.rand(4, 8)]


def get_init_inputs():
    return []
