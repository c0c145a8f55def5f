"""Token and positional embeddings."""
import torch
from torch import nn

from . import functional


class SinusoidalPositions(nn.Module):
    """Fixed Vaswani et al. table, added to the input; no parameters."""

    def __init__(self, max_positions, dim):
        super().__init__()
        self.register_buffer("table", functional.sinusoidal_positions(max_positions, dim),
                             persistent=False)

    def forward(self, x, start=0):
        return x + self.table[start : start + x.shape[1]].to(x.dtype)


class LearnedPositions(nn.Module):
    def __init__(self, max_positions, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_positions, dim) * 0.02)

    def forward(self, x, start=0):
        return x + self.weight[start : start + x.shape[1]]
