import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """addmv"""

    def forward(self, c, a, v):
        return torch.addmv(c, a, v, beta=0.5, alpha=2.0)


def get_inputs():
    return [torch.randn(3), torch.randn(3, 4), torch.randn(4)]


def get_init_inputs():
    return []
