import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """Tensor.unfold (sliding windows)"""

    def forward(self, x):
        return x.unfold(1, 4, 2)


def get_inputs():
    return [torch.randn(4, 10)]


def get_init_inputs():
    return []
