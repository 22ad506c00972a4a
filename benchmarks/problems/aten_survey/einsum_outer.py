import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """einsum i,j->ij"""

    def forward(self, a, b):
        return torch.einsum('i,j->ij', a, b)


def get_inputs():
    return [torch.randn(5), torch.randn(6)]


def get_init_inputs():
    return []
