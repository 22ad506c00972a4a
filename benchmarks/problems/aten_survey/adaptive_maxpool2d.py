import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """adaptive_max_pool2d"""

    def forward(self, x):
        return F.adaptive_max_pool2d(x, (2, 2))


def get_inputs():
    return [torch.randn(1, 2, 6, 6)]


def get_init_inputs():
    return []
