import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """index_put accumulate"""

    def forward(self, x, i, v):
        return x.index_put((i,), v, accumulate=True)


def get_inputs():
    return [torch.randn(8, 4), torch.randint(0, 8, (3,)), torch.randn(3, 4)]


def get_init_inputs():
    return []
