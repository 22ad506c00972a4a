import torch
import torch.nn as nn

batch_size = 16
dim1 = 256
dim2 = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.max(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
