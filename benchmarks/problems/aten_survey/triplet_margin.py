import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """triplet_margin_loss"""

    def forward(self, a, p, n):
        return F.triplet_margin_loss(a, p, n)


def get_inputs():
    return [torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)]


def get_init_inputs():
    return []
