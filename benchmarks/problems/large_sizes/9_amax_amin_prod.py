import torch
import torch.nn as nn

batch_size = 16
dim1 = 256
dim2 = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=1) - torch.amin(x, dim=1) + torch.prod(1.0 + 0.001 * x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
