import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """max_pool2d return_indices"""

    def forward(self, x):
        return F.max_pool2d(x, 2, return_indices=True)


def get_inputs():
    return [torch.randn(1, 2, 4, 4)]


def get_init_inputs():
    return []
