import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """topk k=3 largest=False"""

    def forward(self, x):
        return torch.topk(x, 3, largest=False)[0]


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
