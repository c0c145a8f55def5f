"""Blocks built from the attention layers: the engine's engine/blocks/, same math, same names.

A TransformerBlock is a residual stack of up to three sublayers, each wrapped by its norm:
self-attention (`self_attn`, `self_attn_norm`), cross-attention to a memory (`cross_attn`,
`cross_attn_norm`) and a position-wise feed-forward network (`ffn`, `ffn_norm`).
  pre-norm (Xiong et al. 2020):  x = x + sublayer(norm(x))
  post-norm (Vaswani et al.):    x = norm(x + sublayer(x))
Encoder block = self-attention + FFN; GPT-style decoder block = causal self-attention + FFN;
Vaswani decoder block = causal self-attention + cross-attention + FFN; Perceiver IO
cross-attention block and Set Transformer MAB(X, Y) = cross-attention + FFN; SAB(X) = MAB(X, X).
"""
import torch
from torch import nn

from . import functional
from .attention import MultiHeadAttention
from .norms import LayerNorm, RMSNorm, ScaleNorm

ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": functional.gelu_erf,
    "gelu_tanh": functional.gelu_tanh,
    "silu": functional.silu,
}
NORMS = {"layer_norm": LayerNorm, "rms_norm": RMSNorm, "scale_norm": ScaleNorm}


def make_norm(kind, dim, eps):
    return NORMS[kind](dim, eps=eps)


class FeedForward(nn.Module):
    """fc2(activation(fc1(x))), position-wise; gated (Shazeer 2020):
    fc2(activation(gate(x)) * fc1(x)), SwiGLU with silu, GEGLU with gelu."""

    def __init__(self, dim, hidden_dim, activation="gelu", bias=True, out_dim=None, gated=False):
        super().__init__()
        self.activation = activation
        self.fc1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.gate = nn.Linear(dim, hidden_dim, bias=bias) if gated else None
        self.fc2 = nn.Linear(hidden_dim, out_dim or dim, bias=bias)

    def forward(self, x):
        act = ACTIVATIONS[self.activation]
        if self.gate is None:
            return self.fc2(act(self.fc1(x)))
        return self.fc2(act(self.gate(x)) * self.fc1(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, ffn_dim, head_dim_qk=None, head_dim_v=None,
                 attention="softmax", norm="layer_norm", norm_eps=1e-5, norm_position="pre",
                 self_attention=True, causal=False, cross_attention=False, memory_dim=0,
                 alibi=False, activation="gelu", feature_map="elu_plus_one", bias=True,
                 num_kv_heads=0, rotary=None, window=0, gated_ffn=False):
        super().__init__()
        assert norm_position in ("pre", "post"), norm_position
        assert self_attention or cross_attention
        self.norm_position = norm_position
        common = dict(head_dim_qk=head_dim_qk, head_dim_v=head_dim_v, bias=bias,
                      feature_map=feature_map, num_kv_heads=num_kv_heads)
        self.self_attn = self.cross_attn = None
        if self_attention:
            self.self_attn = MultiHeadAttention(dim, num_heads, kind=attention, causal=causal,
                                                alibi=alibi, rotary=rotary, window=window,
                                                **common)
            self.self_attn_norm = make_norm(norm, dim, norm_eps)
        if cross_attention:
            # XSA removes a token's own value, which a memory does not hold: cross-attention
            # uses softmax attention in an exclusive model.
            kind = "softmax" if attention == "exclusive" else attention
            self.cross_attn = MultiHeadAttention(dim, num_heads, memory_dim=memory_dim or dim,
                                                 kind=kind, **common)
            self.cross_attn_norm = make_norm(norm, dim, norm_eps)
        self.ffn = FeedForward(dim, ffn_dim, activation, bias, gated=gated_ffn)
        self.ffn_norm = make_norm(norm, dim, norm_eps)

    def _sublayer(self, x, lengths, norm, fn):
        if self.norm_position == "pre":
            out = x + fn(norm(x))
        else:
            out = norm(x + fn(x))
        return functional.zero_padding(out, lengths)

    def forward(self, x, lengths, memory=None, memory_lengths=None, cache=None):
        """cache: a dict per block that causal self-attention extends (see
        MultiHeadAttention.heads)."""
        if self.self_attn is not None:
            x = self._sublayer(x, lengths, self.self_attn_norm,
                               lambda h: self.self_attn(h, lengths, cache=cache))
        if self.cross_attn is not None:
            x = self._sublayer(x, lengths, self.cross_attn_norm,
                               lambda h: self.cross_attn(h, lengths, memory, memory_lengths))
        return self._sublayer(x, lengths, self.ffn_norm, self.ffn)


class InducedSetAttention(nn.Module):
    """ISAB (Lee et al. 2019): H = MAB(I, X) with m learned inducing points I, then MAB(X, H)."""

    def __init__(self, dim, num_inducing, **block_args):
        super().__init__()
        self.inducing_points = nn.Parameter(torch.randn(num_inducing, dim) * 0.1)
        self.induce = TransformerBlock(dim, self_attention=False, cross_attention=True,
                                       **block_args)
        self.attend = TransformerBlock(dim, self_attention=False, cross_attention=True,
                                       **block_args)

    def forward(self, x, lengths):
        batch, m = x.shape[0], self.inducing_points.shape[0]
        inducing = self.inducing_points.expand(batch, -1, -1).to(x.dtype)
        full = torch.full((batch,), m, dtype=torch.int64)
        h = self.induce(inducing, full, x, lengths)
        return self.attend(x, lengths, h, full)


class PoolingByAttention(nn.Module):
    """PMA_k (Lee et al. 2019): MAB(S, rFF(Z)) with k learned seed vectors S: [B, k, dim]."""

    def __init__(self, dim, num_seeds, ffn_dim, activation="gelu", bias=True, gated_ffn=False,
                 **block_args):
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(num_seeds, dim) * 0.1)
        self.rff = FeedForward(dim, ffn_dim, activation, bias, gated=gated_ffn)
        block_args.update(rotary=None, window=0)
        self.block = TransformerBlock(dim, ffn_dim=ffn_dim, activation=activation, bias=bias,
                                      gated_ffn=gated_ffn, self_attention=False,
                                      cross_attention=True, **block_args)

    def forward(self, z, lengths):
        batch, k = z.shape[0], self.seeds.shape[0]
        seeds = self.seeds.expand(batch, -1, -1).to(z.dtype)
        full = torch.full((batch,), k, dtype=torch.int64)
        return self.block(seeds, full, functional.zero_padding(self.rff(z), lengths), lengths)
