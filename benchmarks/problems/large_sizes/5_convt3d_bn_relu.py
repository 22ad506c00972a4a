import torch
import torch.nn as nn

batch_size = 16
in_channels = 32
out_channels = 64
depth, height, width = 16, 32, 32


class Model(nn.Module):
    """conv_transpose3d followed by a norm and an activation (a common fused problem)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.ConvTranspose3d(cin, cout, 3, stride=2, padding=1, output_padding=1)
        self.bn = nn.BatchNorm3d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
