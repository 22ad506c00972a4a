import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """diag of a vector"""

    def forward(self, v):
        return torch.diag(v)


def get_inputs():
    return [torch.randn(5)]


def get_init_inputs():
    return []
