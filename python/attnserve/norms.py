"""Normalization modules; parameter names are the engine's tensor names."""
import math

import torch
from torch import nn

from . import functional


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5, bias=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        return functional.layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return functional.rms_norm(x, self.weight, self.eps)


class ScaleNorm(nn.Module):
    """One learned scalar g, initialized to sqrt(dim) as Nguyen & Salazar suggest."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.tensor(math.sqrt(dim)))

    def forward(self, x):
        return functional.scale_norm(x, self.g, self.eps)
