import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """hinge_embedding_loss"""

    def forward(self, x, y):
        return F.hinge_embedding_loss(x, y)


def get_inputs():
    return [torch.randn(4, 8), torch.randint(0, 2, (4, 8)).float() * 2 - 1]


def get_init_inputs():
    return []
