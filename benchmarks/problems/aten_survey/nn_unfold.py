import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """F.unfold (im2col)"""

    def forward(self, x):
        return F.unfold(x, kernel_size=2)


def get_inputs():
    return [torch.randn(1, 2, 5, 5)]


def get_init_inputs():
    return []
