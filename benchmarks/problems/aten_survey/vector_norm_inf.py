import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """linalg.vector_norm ord=inf"""

    def forward(self, x):
        return torch.linalg.vector_norm(x, ord=float('inf'), dim=-1)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
