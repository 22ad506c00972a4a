import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """pdist"""

    def forward(self, a):
        return F.pdist(a)


def get_inputs():
    return [torch.randn(5, 3)]


def get_init_inputs():
    return []
