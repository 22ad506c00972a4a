import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """pad reflect 1-D"""

    def forward(self, x):
        return F.pad(x, (2, 1), mode='reflect')


def get_inputs():
    return [torch.randn(1, 2, 6)]


def get_init_inputs():
    return []
