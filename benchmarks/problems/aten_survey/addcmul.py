import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """addcmul"""

    def forward(self, x, a, b):
        return torch.addcmul(x, a, b, value=0.5)


def get_inputs():
    return [torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)]


def get_init_inputs():
    return []
