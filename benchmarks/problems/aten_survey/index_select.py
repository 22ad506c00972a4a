import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """index_select"""

    def forward(self, x, i):
        return torch.index_select(x, 0, i)


def get_inputs():
    return [torch.randn(8, 4), torch.randint(0, 8, (5,))]


def get_init_inputs():
    return []
