import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """scatter a value"""

    def forward(self, x, i):
        return torch.scatter(x, 1, i, 2.0)


def get_inputs():
    return [torch.randn(4, 8), torch.randint(0, 8, (4, 3))]


def get_init_inputs():
    return []
