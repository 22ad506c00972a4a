import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """amax"""

    def forward(self, x):
        return torch.amax(x, dim=(0, 1))


def get_inputs():
    return [torch.randn(4, 8, 3)]


def get_init_inputs():
    return []
