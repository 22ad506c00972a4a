import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """F.fold (col2im)"""

    def forward(self, x):
        return F.fold(x, output_size=(4, 4), kernel_size=2)


def get_inputs():
    return [torch.randn(1, 8, 9)]


def get_init_inputs():
    return []
