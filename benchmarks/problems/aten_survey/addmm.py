import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """addmm alpha/beta"""

    def forward(self, c, a, b):
        return torch.addmm(c, a, b, beta=0.5, alpha=2.0)


def get_inputs():
    return [torch.randn(3, 5), torch.randn(3, 4), torch.randn(4, 5)]


def get_init_inputs():
    return []
