import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """interpolate trilinear"""

    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode='trilinear')


def get_inputs():
    return [torch.randn(1, 2, 3, 3, 3)]


def get_init_inputs():
    return []
