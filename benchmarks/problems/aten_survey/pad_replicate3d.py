import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """pad replicate 3-D"""

    def forward(self, x):
        return F.pad(x, (1, 1, 1, 1, 1, 1), mode='replicate')


def get_inputs():
    return [torch.randn(1, 1, 3, 3, 3)]


def get_init_inputs():
    return []
