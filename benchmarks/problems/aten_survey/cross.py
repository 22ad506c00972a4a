import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """cross product"""

    def forward(self, a, b):
        return torch.cross(a, b, dim=1)


def get_inputs():
    return [torch.randn(4, 3), torch.randn(4, 3)]


def get_init_inputs():
    return []
