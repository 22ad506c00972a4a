import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """bucketize"""

    def forward(self, x, b):
        return torch.bucketize(x, b)


def get_inputs():
    return [torch.randn(4, 8), torch.linspace(-2, 2, 7)]


def get_init_inputs():
    return []
