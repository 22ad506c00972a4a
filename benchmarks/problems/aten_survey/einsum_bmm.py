import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """einsum bij,bjk->bik"""

    def forward(self, a, b):
        return torch.einsum('bij,bjk->bik', a, b)


def get_inputs():
    return [torch.randn(2, 3, 4), torch.randn(2, 4, 5)]


def get_init_inputs():
    return []
