import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """torch.norm p=2 over a dim"""

    def forward(self, x):
        return torch.norm(x, p=2, dim=1)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
