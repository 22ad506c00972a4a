import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """triu"""

    def forward(self, x):
        return torch.triu(x, diagonal=1)


def get_inputs():
    return [torch.randn(5, 5)]


def get_init_inputs():
    return []
