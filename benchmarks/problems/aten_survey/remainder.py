import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """remainder"""

    def forward(self, a, b):
        return torch.remainder(a, b)


def get_inputs():
    return [torch.randn(4, 8), torch.rand(4, 8) + 0.5]


def get_init_inputs():
    return []
