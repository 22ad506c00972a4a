import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """smooth_l1_loss"""

    def forward(self, a, b):
        return F.smooth_l1_loss(a, b)


def get_inputs():
    return [torch.randn(4, 8), torch.randn(4, 8)]


def get_init_inputs():
    return []
