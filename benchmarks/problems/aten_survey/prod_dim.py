import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """prod over a dim"""

    def forward(self, x):
        return torch.prod(x, dim=1)


def get_inputs():
    return [torch.rand(4, 8) + 0.5]


def get_init_inputs():
    return []
