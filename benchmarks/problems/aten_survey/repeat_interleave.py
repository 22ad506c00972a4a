import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """repeat_interleave"""

    def forward(self, x):
        return torch.repeat_interleave(x, 2, dim=0)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
