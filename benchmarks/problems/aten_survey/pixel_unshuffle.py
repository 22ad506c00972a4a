import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """pixel_unshuffle"""

    def forward(self, x):
        return F.pixel_unshuffle(x, 2)


def get_inputs():
    return [torch.randn(1, 2, 4, 4)]


def get_init_inputs():
    return []
