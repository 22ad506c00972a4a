import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """diagonal"""

    def forward(self, x):
        return torch.diagonal(x, offset=1)


def get_inputs():
    return [torch.randn(5, 5)]


def get_init_inputs():
    return []
