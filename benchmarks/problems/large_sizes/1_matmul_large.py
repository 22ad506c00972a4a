import torch
import torch.nn as nn

M = 1024
K = 8192
N = 8192


class Model(nn.Module):
    """C = A @ B at the sizes of a large benchmark problem."""

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
