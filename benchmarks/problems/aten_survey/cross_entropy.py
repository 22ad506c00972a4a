import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """cross_entropy"""

    def forward(self, x, t):
        return F.cross_entropy(x, t)


def get_inputs():
    return [torch.randn(4, 5), torch.randint(0, 5, (4,))]


def get_init_inputs():
    return []
