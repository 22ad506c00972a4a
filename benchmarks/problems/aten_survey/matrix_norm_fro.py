import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """linalg.matrix_norm fro"""

    def forward(self, x):
        return torch.linalg.matrix_norm(x)


def get_inputs():
    return [torch.randn(2, 4, 4)]


def get_init_inputs():
    return []
