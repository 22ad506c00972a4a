import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """scatter_add"""

    def forward(self, x, i, s):
        return x.scatter_add(1, i, s)


def get_inputs():
    return [torch.randn(4, 8), torch.randint(0, 8, (4, 3)), torch.randn(4, 3)]


def get_init_inputs():
    return []
