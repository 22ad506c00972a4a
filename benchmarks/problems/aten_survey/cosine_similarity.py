import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """cosine_similarity"""

    def forward(self, a, b):
        return F.cosine_similarity(a, b, dim=-1)


def get_inputs():
    return [torch.randn(4, 8), torch.randn(4, 8)]


def get_init_inputs():
    return []
